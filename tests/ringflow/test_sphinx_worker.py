"""The pocketsphinx worker the audio simulator decodes with: an answer left in the pipe by a
request whose caller gave up (a call that ended mid-decode) is never taken for the next
request's, which made every later transcript of the process one utterance late."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ringflow.simulation.audio.caller_voice import CallerVoice
from ringflow.simulation.audio.sphinx import SphinxWorker, grammar_of

pytestmark = pytest.mark.timeout(300)
LINES = ["It arrived broken. I'd like my money back.", "No, that's all, thanks."]


async def test_an_abandoned_requests_answer_is_skipped(tmp_path: Path) -> None:
    voice = CallerVoice(tmp_path / "audio-cache")
    first, second = (voice.speak(line).tobytes() for line in LINES)
    grammar = grammar_of(LINES)
    worker = SphinxWorker()
    worker.start()
    assert worker.ready is not None
    await worker.ready
    proc = worker.proc
    assert proc is not None and proc.stdin is not None
    try:
        # what a decode cancelled after sending its audio leaves behind: a request whose
        # answer nobody reads
        proc.stdin.write(json.dumps({"id": 0, "n": len(first), "g": grammar}).encode() + b"\n" + first)
        assert await worker.decode(second, grammar) == "no that's all thanks"
        assert await worker.decode(first, grammar) == "it arrived broken i'd like my money back"
    finally:
        worker.stop()
        await proc.wait()
