"""A livekit TTS plugin on Debian's ``espeak-ng``: offline, 25-40 ms a sentence.

Each sentence is one ``espeak-ng --stdout`` run (livekit's ``StreamAdapter`` splits a
reply into sentences, so the first one plays while the LLM still writes the rest).
"""

from __future__ import annotations

import asyncio
import io as _io
import shutil
import wave

from livekit.agents import APIConnectOptions, tts, utils
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS

SAMPLE_RATE = 22050


class EspeakMissing(RuntimeError):
    pass


def espeak_path() -> str:
    path = shutil.which("espeak-ng")
    if path is None:
        raise EspeakMissing(
            "the audio simulator speaks with espeak-ng: install it (apt-get install espeak-ng)"
        )
    return path


class EspeakTTS(tts.TTS):
    def __init__(self, *, voice: str = "en-us", words_per_minute: int = 175) -> None:
        super().__init__(
            capabilities=tts.TTSCapabilities(streaming=False), sample_rate=SAMPLE_RATE, num_channels=1
        )
        self._binary = espeak_path()
        self._voice = voice
        self._wpm = words_per_minute
        self.synth_s: list[float] = []  # each sentence's synthesis time (the bench's TTS)

    @property
    def model(self) -> str:
        return "espeak-ng"

    @property
    def provider(self) -> str:
        return "espeak-ng"

    def synthesize(
        self, text: str, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS
    ) -> tts.ChunkedStream:
        return _EspeakStream(tts=self, input_text=text, conn_options=conn_options)


class _EspeakStream(tts.ChunkedStream):
    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        engine: EspeakTTS = self._tts  # type: ignore[assignment]
        loop = asyncio.get_running_loop()
        started = loop.time()
        proc = await asyncio.create_subprocess_exec(
            engine._binary,
            "--stdout",
            "-v",
            engine._voice,
            "-s",
            str(engine._wpm),
            "--",
            self._input_text,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        wav, _ = await proc.communicate()
        engine.synth_s.append(loop.time() - started)
        output_emitter.initialize(
            request_id=utils.shortuuid(), sample_rate=SAMPLE_RATE, num_channels=1, mime_type="audio/pcm"
        )
        if wav:
            with wave.open(_io.BytesIO(wav)) as w:
                output_emitter.push(w.readframes(w.getnframes()))
        output_emitter.flush()
