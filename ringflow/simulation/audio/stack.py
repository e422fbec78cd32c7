"""The offline speech stack the audio simulator gives every agent, whatever the flow names.

livekit's own VAD (silero, its weights in the plugin's wheel) and end-of-turn model
(``turn-detector-v1-mini`` from ``livekit-local-inference``: in the wheel, run in process),
pocketsphinx for speech-to-text, espeak-ng for text-to-speech. Nothing is downloaded at run
time. The session is built as production builds it (``ringflow.servers.agent``): the same
user-away timeout (the flow's idle timeout) and the same echo-cancellation warm-up for the
call's kind (a phone line: none).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from livekit.agents import AgentSession

from ringflow.servers.agent import aec_warmup_s, load_turn_detector
from ringflow.simulation.audio.caller_voice import CallerVoice
from ringflow.simulation.audio.espeak import EspeakTTS, espeak_path
from ringflow.simulation.audio.line import AudioLine
from ringflow.simulation.audio.sphinx import SphinxSTT, shared_pool

_LOCK = threading.Lock()
_VAD: Any = None

# What production would have used, reported in each audio result (the simulator's is offline).
OFFLINE = {
    "vad": "silero",
    "turn_detection": "turn-detector-v1-mini",
    "stt": "pocketsphinx",
    "tts": "espeak-ng",
}


def shared_vad() -> Any:
    global _VAD
    with _LOCK:
        if _VAD is None:
            from livekit.plugins import silero

            _VAD = silero.VAD.load()
        return _VAD


def warm() -> None:
    """Everything a first audio call would otherwise load on the event loop it shares with
    the worker: the VAD, the end-of-turn model, the decoder processes; espeak-ng is checked."""
    espeak_path()
    shared_vad()
    load_turn_detector()
    shared_pool()


def audio_session(
    llm: Any, *, phrases: list[str], idle_s: float, phone: bool = True
) -> tuple[AgentSession, AudioLine]:
    """An ``AgentSession`` on the offline stack, its audio on a new simulated line."""
    session: AgentSession = AgentSession(
        llm=llm,
        stt=SphinxSTT(phrases=phrases),
        tts=EspeakTTS(),
        vad=shared_vad(),
        user_away_timeout=idle_s,
        aec_warmup_duration=aec_warmup_s(phone),
    )
    line = AudioLine()
    line.attach(session)
    return session, line


def caller_voice(data_dir: Path) -> CallerVoice:
    return CallerVoice(data_dir / "audio-cache")
