"""A livekit STT plugin on pocketsphinx, offline, its US English model from the wheel.

pocketsphinx decodes in C while holding the GIL (0.2-1 s an utterance): in the agent's
process it would stall the event loop that paces the audio, so each utterance is decoded
in a worker process. The plugin is non-streaming (``recognize``): livekit wraps it in its
``StreamAdapter``, which cuts utterances with the session's VAD, as it does for any batch STT.

``phrases`` (the script's caller lines) become a JSGF grammar: the decoder then picks one
of the lines it could hear, so a test's transcript is exact. Lines with a word outside the
model's dictionary leave the decoder on its language model (a real transcript, not exact).
"""

from __future__ import annotations

import asyncio
import hashlib
import multiprocessing
import re
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import Any

import numpy as np
from livekit import rtc
from livekit.agents import APIConnectOptions, stt, utils
from livekit.agents.language import LanguageCode
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, NOT_GIVEN, NotGivenOr

SAMPLE_RATE = 16000
_DECODERS: dict[str, Any] = {}  # in the worker: one decoder per grammar
_POOL: ProcessPoolExecutor | None = None


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
    key = hashlib.sha256((grammar or "").encode()).hexdigest()
    dec = _DECODERS.get(key)
    if dec is None:
        from pocketsphinx import Decoder  # type: ignore[import-untyped]

        dec = Decoder(samprate=SAMPLE_RATE, fwdflat=False, loglevel="FATAL")
        if grammar is not None:
            known = all(
                dec.lookup_word(w) is not None for w in re.findall(r"[a-z']+", grammar.split("=", 1)[1])
            )
            if known:
                dec.add_jsgf_string("caller", grammar)
                dec.activate_search("caller")
        _DECODERS[key] = dec
    return dec


def decode(pcm: bytes, grammar: str | None) -> str:
    """Runs in the worker process: 16 kHz int16 mono in, the words heard out ("" for none)."""
    dec = _decoder(grammar)
    dec.start_utt()
    dec.process_raw(pcm, full_utt=True)
    dec.end_utt()
    hyp = dec.hyp()
    return hyp.hypstr.strip() if hyp is not None else ""


def _warm() -> None:
    _decoder(None)


def shared_pool() -> Executor:
    """The process's decoder workers (spawned: this process runs threads a fork would copy)."""
    global _POOL
    if _POOL is None:
        _POOL = ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn"))
        _POOL.submit(_warm)
        _POOL.submit(_warm)
    return _POOL


def shutdown_pool() -> None:
    global _POOL
    if _POOL is not None:
        _POOL.shutdown(wait=False, cancel_futures=True)
        _POOL = None


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
    def __init__(self, *, phrases: list[str] | None = None, executor: Executor | None = None) -> None:
        super().__init__(capabilities=stt.STTCapabilities(streaming=False, interim_results=False))
        self._grammar = grammar_of(phrases or [])
        self._executor = executor or shared_pool()
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
        text = await loop.run_in_executor(self._executor, decode, pcm, self._grammar)
        self.decode_s.append(loop.time() - started)
        return stt.SpeechEvent(
            type=stt.SpeechEventType.FINAL_TRANSCRIPT,
            alternatives=[stt.SpeechData(language=LanguageCode("en"), text=text)],
        )
