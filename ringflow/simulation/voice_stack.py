"""The simulator's :class:`~ringflow.agents.voice.VoiceStack`: a flow's ``voice:`` settings
applied with the offline stack, whatever providers they name.

Every TTS a flow names is espeak-ng, every STT pocketsphinx (on real audio; text mode has
neither and keeps none), every LLM the scripted one with the flow's temperature; a list is
still livekit's ``FallbackAdapter`` over them, turn detection, endpointing and interruption
are applied as in production. Background sounds play through production's code
(``agents/background_audio.py``: livekit's ``BackgroundAudioPlayer``) into the simulated
line's room (``simulation/audio/background.py``) when the stack is given one, where the
caller hears them; they are recorded either way. Noise cancellation needs LiveKit Cloud: it
is only recorded. What production would have built is in each result's ``voice``
(``production_voice``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from livekit.agents import AgentSession
from livekit.agents import llm as lk_llm

from ringflow.agents.background_audio import BackgroundSounds
from ringflow.callflow.model import Flow
from ringflow.callflow.voice import (
    BackgroundAudio,
    LlmChoice,
    NoiseCancellation,
    SttChoice,
    TtsChoice,
    TurnDetection,
    voice_for,
)


class SimulatedStack:
    """``llm_of`` builds the scripted model for a choice; ``audio``: the call runs on real
    audio (espeak-ng and pocketsphinx, held to ``phrases``), else text mode (no speech);
    ``room_of``: the simulated room of a session's line, where background sounds play."""

    def __init__(
        self,
        llm_of: Callable[[LlmChoice], lk_llm.LLM],
        *,
        audio: bool,
        phrases: list[str] | None = None,
        room_of: Callable[[AgentSession], Any] | None = None,
    ) -> None:
        self.llm_of = llm_of
        self.audio = audio
        self.phrases = list(phrases or [])
        self.room_of = room_of
        self.background_sounds: BackgroundSounds | None = None  # the live session's
        self.sounds: list[dict[str, Any] | None] = []  # each background change, in order
        self.noise: NoiseCancellation | None = None

    def tts(self, choice: TtsChoice) -> Any:
        if not self.audio:
            return None
        from ringflow.simulation.audio.espeak import EspeakTTS

        return EspeakTTS()

    def stt(self, choice: SttChoice) -> Any:
        if not self.audio:
            return None
        from ringflow.simulation.audio.sphinx import SphinxSTT

        return SphinxSTT(phrases=self.phrases)

    def llm(self, choice: LlmChoice) -> lk_llm.LLM:
        return self.llm_of(choice)

    def turn_detector(self, mode: TurnDetection) -> Any:
        if mode == "vad":
            return "vad"
        from livekit.agents import inference

        return inference.TurnDetector()  # the local end-of-turn model (livekit-local-inference)

    def background(self, sounds: BackgroundAudio | None, session: AgentSession) -> None:
        self.sounds.append(sounds.model_dump() if sounds is not None else None)
        if self.room_of is None:
            return
        live = self.background_sounds
        if live is None or live.session is not session:  # a new agent: its own player
            live = self.background_sounds = BackgroundSounds(self.room_of(session), session)
        live.switch(sounds)

    def room_options(self, noise: NoiseCancellation | None) -> Any:
        self.noise = noise
        return None


def production_voice(flow: Flow, path: list[str]) -> dict[str, Any]:
    """What production would have used on each node the call went through (the flow's
    ``voice`` with the node's over it), for the nodes where the flow sets anything."""
    out: dict[str, Any] = {}
    for node in dict.fromkeys(path):
        own = flow.nodes[node].voice if node in flow.nodes else None
        settings = voice_for(flow.voice, own)
        data = settings.model_dump(mode="json", exclude_none=True)
        if data:
            out[node] = data
    return out
