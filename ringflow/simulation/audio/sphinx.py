"""A livekit STT plugin on pocketsphinx, offline, its US English model from the wheel.

pocketsphinx decodes in C while holding the GIL (0.2-1 s an utterance): in the agent's
process it would stall the event loop that paces the audio, so each utterance is decoded
in a worker process (a plain subprocess on stdin/stdout: nothing of this process is
re-imported there). The plugin is non-streaming (``recognize``): livekit wraps it in its
``StreamAdapter``, which cuts utterances with the session's VAD, as for any batch STT.

``phrases`` (the script's caller lines) become a JSGF grammar: the decoder then picks one
of the lines it could hear, so a test's transcript is exact. Lines with a word outside the
model's dictionary leave the decoder on its language model (a real transcript, not exact).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import sys
from typing import Any

import numpy as np
from livekit import rtc
from livekit.agents import APIConnectOptions, stt, utils
from livekit.agents.language import LanguageCode
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, NOT_GIVEN, NotGivenOr

SAMPLE_RATE = 16000
_DECODERS: dict[str, Any] = {}  # in the worker: one decoder per grammar
_POOLS: dict[asyncio.AbstractEventLoop, SphinxPool] = {}


def words_of(line: str) -> list[str]:
    return re.findall(r"[a-z']+", line.lower().replace("-", " "))


def grammar_of(phrases: list[str]) -> str | None:
    """A JSGF grammar accepting exactly these lines (as words), or None without lines."""
    lines = sorted({" ".join(words_of(p)) for p in phrases if words_of(p)})
    if not lines:
        return None
    body = " | ".join(f"( {line} )" for line in lines)
    return f"#JSGF V1.0;\ngrammar caller;\npublic <line> = {body};\n"


def _decoder(grammar: str | None) -> Any:
    """The worker's one decoder (its acoustic model loads once, 1-3 s), with one search per
    grammar added to it (milliseconds), the grammar's search active."""
    dec = _DECODERS.get("")
    if dec is None:
        from pocketsphinx import Decoder  # type: ignore[import-untyped]

        dec = Decoder(samprate=SAMPLE_RATE, fwdflat=False, loglevel="FATAL")
        _DECODERS[""] = dec
    name = None
    if grammar is not None:
        key = "g" + hashlib.sha256(grammar.encode()).hexdigest()[:16]
        if key not in _DECODERS:
            words = re.findall(r"[a-z']+", grammar.split("=", 1)[1])
            known = all(dec.lookup_word(w) is not None for w in words)
            if known:
                dec.add_jsgf_string(key, grammar)
            _DECODERS[key] = known
        name = key if _DECODERS[key] else None
    dec.activate_search(name)
    return dec


def decode(pcm: bytes, grammar: str | None) -> str:
    """Runs in the worker process: 16 kHz int16 mono in, the words heard out ("" for none)."""
    dec = _decoder(grammar)
    dec.start_utt()
    dec.process_raw(pcm, full_utt=True)
    dec.end_utt()
    hyp = dec.hyp()
    return hyp.hypstr.strip() if hyp is not None else ""


def serve() -> None:
    """The worker's loop (``python -m ringflow.simulation.audio.sphinx``): a JSON header line
    ``{"id": N, "n": BYTES, "g": GRAMMAR}`` then the audio on stdin; a JSON line
    ``{"id": N, "text": ...}`` out."""
    import sys

    _decoder(None)  # the acoustic model, loaded before the first utterance
    src, out = sys.stdin.buffer, sys.stdout
    out.write("ready\n")
    out.flush()
    for header in src:
        ask = json.loads(header)
        pcm = src.read(ask["n"])
        out.write(json.dumps({"id": ask.get("id"), "text": decode(pcm, ask.get("g"))}) + "\n")
        out.flush()


class SphinxWorker:
    """One decoder process, one utterance at a time.

    Each request carries a number the answer echoes: a decode cancelled after its audio was
    sent (the call ended, livekit dropped the utterance) leaves its answer in the pipe, and
    the next request, another call's perhaps, must skip it rather than take it for its own
    (which shifted every later transcript of the process by one utterance)."""

    def __init__(self) -> None:
        self.proc: asyncio.subprocess.Process | None = None
        self.lock = asyncio.Lock()
        self.ready: asyncio.Task[None] | None = None
        self.sent = 0  # the last request's number

    def start(self) -> None:
        if self.ready is None:
            self.ready = asyncio.get_running_loop().create_task(self._start())

    async def _start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "ringflow.simulation.audio.sphinx",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        await self.proc.stdout.readline()  # "ready"

    async def decode(self, pcm: bytes, grammar: str | None) -> str:
        self.start()
        assert self.ready is not None
        async with self.lock:
            await self.ready
            proc = self.proc
            assert proc is not None and proc.stdin is not None and proc.stdout is not None
            self.sent += 1
            ask = self.sent
            proc.stdin.write(json.dumps({"id": ask, "n": len(pcm), "g": grammar}).encode() + b"\n" + pcm)
            await proc.stdin.drain()
            while True:
                line = await proc.stdout.readline()
                if not line:
                    raise RuntimeError("the pocketsphinx worker exited")
                answer = json.loads(line)
                if answer.get("id") == ask:  # an earlier, cancelled request's answer: skipped
                    return str(answer["text"])

    def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()


class SphinxPool:
    """The process's decoder workers: an utterance goes to a free one (calls in parallel)."""

    def __init__(self, size: int = 2) -> None:
        self.workers = [SphinxWorker() for _ in range(size)]

    def start(self) -> None:
        for w in self.workers:
            w.start()

    async def decode(self, pcm: bytes, grammar: str | None) -> str:
        free = [w for w in self.workers if not w.lock.locked()]
        return await (free[0] if free else self.workers[0]).decode(pcm, grammar)

    def stop(self) -> None:
        for w in self.workers:
            w.stop()


def shared_pool() -> SphinxPool:
    """This event loop's decoder workers (started on first use)."""
    loop = asyncio.get_running_loop()
    pool = _POOLS.get(loop)
    if pool is None:
        pool = _POOLS[loop] = SphinxPool()
        pool.start()
    return pool


def shutdown_pool() -> None:
    for pool in _POOLS.values():
        pool.stop()
    _POOLS.clear()


def to_16k(buffer: utils.AudioBuffer) -> bytes:
    frame = rtc.combine_audio_frames(buffer) if isinstance(buffer, list) else buffer
    if frame.sample_rate == SAMPLE_RATE and frame.num_channels == 1:
        return bytes(frame.data)
    resampler = rtc.AudioResampler(frame.sample_rate, SAMPLE_RATE, num_channels=frame.num_channels)
    frames = resampler.push(frame) + resampler.flush()
    data = np.frombuffer(b"".join(bytes(f.data) for f in frames), dtype=np.int16)
    if frame.num_channels > 1:
        data = data.reshape(-1, frame.num_channels).mean(axis=1).astype(np.int16)
    return data.tobytes()


class SphinxSTT(stt.STT):
    def __init__(self, *, phrases: list[str] | None = None, pool: SphinxPool | None = None) -> None:
        super().__init__(capabilities=stt.STTCapabilities(streaming=False, interim_results=False))
        self._grammar = grammar_of(phrases or [])
        self._pool = pool or shared_pool()
        self.decode_s: list[float] = []  # how long each utterance took to decode (the bench's STT)

    @property
    def model(self) -> str:
        return "pocketsphinx-en-us"

    @property
    def provider(self) -> str:
        return "pocketsphinx"

    async def _recognize_impl(
        self,
        buffer: utils.AudioBuffer,
        *,
        language: NotGivenOr[str] = NOT_GIVEN,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
    ) -> stt.SpeechEvent:
        loop = asyncio.get_running_loop()
        pcm = to_16k(buffer)
        started = loop.time()
        text = await self._pool.decode(pcm, self._grammar)
        self.decode_s.append(loop.time() - started)
        return stt.SpeechEvent(
            type=stt.SpeechEventType.FINAL_TRANSCRIPT,
            alternatives=[stt.SpeechData(language=LanguageCode("en"), text=text)],
        )


if __name__ == "__main__":
    serve()
