"""Production's :class:`~ringflow.agents.voice.VoiceStack`: what a flow's ``voice:`` names,
built with what livekit-agents ships.

``openai`` is livekit's OpenAI plugin (the agent extra installs it; the LLM's server and key
are the deployment's ``RINGFLOW_OPENAI_*``). Every other provider is LiveKit Inference
(``livekit.agents.inference``), named ``provider/model``: it runs on LiveKit Cloud with the
deployment's LiveKit key, so a flow never holds a provider's secret. Background sounds are
livekit's ``BackgroundAudioPlayer`` on the call's room (``agents/background_audio.py``; its
clips ship in livekit-agents).
Noise cancellation is LiveKit Cloud's BVC telephony filter from
``livekit-plugins-noise-cancellation``, which this project does not install: a flow that asks
for it runs without it, saying so once per call.
"""

from __future__ import annotations

import logging
from typing import Any

from livekit.agents import AgentSession, inference
from livekit.agents import llm as lk_llm
from livekit.agents import stt as lk_stt
from livekit.agents import tts as lk_tts
from livekit.agents.voice import room_io

from ringflow.agents.background_audio import BackgroundSounds
from ringflow.callflow.voice import (
    BackgroundAudio,
    LlmChoice,
    NoiseCancellation,
    SttChoice,
    TtsChoice,
    TurnDetection,
)

log = logging.getLogger(__name__)


def inference_model(provider: str, model: str | None) -> str:
    return f"{provider}/{model}" if model else provider


def noise_filter(mode: NoiseCancellation | None) -> Any:
    """The room input's noise filter for ``mode``, or None (not asked for, or not installed)."""
    if mode != "telephony":
        return None
    try:
        from livekit.plugins import noise_cancellation  # type: ignore[attr-defined]
    except ImportError:
        log.warning(
            "voice.noise_cancellation: telephony needs livekit-plugins-noise-cancellation and "
            "LiveKit Cloud; this agent has neither installed, so the call runs without it",
            extra={"event": "noise_cancellation_missing"},
        )
        return None
    return noise_cancellation.BVCTelephony()


class ProviderStack:
    """The deployment's providers: ``llm_model`` its default model (``RINGFLOW_LLM_MODEL``) on
    ``client`` (its OpenAI-compatible server); ``room`` (a LiveKit room) plays the sounds."""

    def __init__(self, llm_model: str, *, client: Any = None, room: Any = None) -> None:
        self.llm_model = llm_model
        self.client = client  # the process's shared OpenAI client (servers/agent.py)
        self.room = room
        self.sounds: BackgroundSounds | None = None  # the session's background sounds

    def tts(self, choice: TtsChoice) -> lk_tts.TTS:
        if choice.provider == "openai":
            from livekit.plugins import openai as lk_openai

            kw: dict[str, Any] = {}
            if choice.model:
                kw["model"] = choice.model
            if choice.voice:
                kw["voice"] = choice.voice
            return lk_openai.TTS(client=self.client, **kw)
        build: Any = inference.TTS  # the model is checked by validation, not by livekit's literals
        return build(
            model=inference_model(choice.provider, choice.model),
            **({"voice": choice.voice} if choice.voice else {}),
            **({"language": choice.language} if choice.language else {}),
        )

    def stt(self, choice: SttChoice) -> lk_stt.STT:
        if choice.provider == "openai":
            from livekit.plugins import openai as lk_openai

            kw: dict[str, Any] = {"language": choice.language or "en"}
            if choice.model:
                kw["model"] = choice.model
            if choice.keywords:
                kw["keywords"] = list(choice.keywords)
            return lk_openai.STT(client=self.client, **kw)
        build: Any = inference.STT
        return build(
            model=inference_model(choice.provider, choice.model),
            **({"language": choice.language} if choice.language else {}),
        )

    def llm(self, choice: LlmChoice) -> lk_llm.LLM:
        from livekit.plugins import openai as lk_openai

        kw: dict[str, Any] = {"model": choice.model or self.llm_model, "client": self.client}
        if choice.temperature is not None:
            kw["temperature"] = choice.temperature
        return lk_openai.LLM(**kw)

    def turn_detector(self, mode: TurnDetection) -> Any:
        return "vad" if mode == "vad" else inference.TurnDetector()

    def room_options(self, noise: NoiseCancellation | None) -> room_io.RoomOptions | None:
        """The room input with the call's noise filter, None when there is none to apply."""
        found = noise_filter(noise)
        if found is None:
            return None
        return room_io.RoomOptions(audio_input=room_io.AudioInputOptions(noise_cancellation=found))

    def background(self, sounds: BackgroundAudio | None, session: AgentSession) -> None:
        """The node's background sounds on the call's room (``agents/background_audio.py``)."""
        if self.room is None:
            return
        if self.sounds is None or self.sounds.session is not session:
            self.sounds = BackgroundSounds(self.room, session)
        self.sounds.switch(sounds)

    async def aclose(self) -> None:
        if self.sounds is not None:
            await self.sounds.aclose()
