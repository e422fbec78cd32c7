"""What a voice user sets per flow: the speech stack, turn taking and sounds (``voice:``).

A flow's ``voice`` block holds the call's defaults; a node's own ``voice`` overrides it key
by key (a node that names ``tts`` replaces the flow's whole ``tts``, its other keys are the
flow's). :func:`voice_for` is that rule, and the agent applies its answer on every
transition (``agents/voice.py``). Providers are checked here, with a "did you mean", against
what livekit-agents 1.8 can build: ``openai`` through its plugin, the rest through LiveKit
Inference (``tests/callflow/test_voice.py`` holds these lists to livekit's own).

Pure: no livekit import (the import graph keeps the domain free of it).
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ringflow.callflow.errors import did_you_mean

# openai: livekit's OpenAI plugin; the others: LiveKit Inference (livekit.agents.inference)
TTS_PROVIDERS = ("openai", "cartesia", "deepgram", "rime", "inworld", "xai", "fishaudio")
STT_PROVIDERS = (
    "openai",
    "deepgram",
    "cartesia",
    "assemblyai",
    "xai",
    "speechmatics",
    "inworld",
    "google",
)
# livekit's BuiltinAudioClip, by a short name (the clips ship in livekit-agents' wheel)
THINKING_SOUNDS = {"keyboard": "KEYBOARD_TYPING", "keyboard2": "KEYBOARD_TYPING2"}
AMBIENT_SOUNDS = {
    "office": "OFFICE_AMBIENCE",
    "city": "CITY_AMBIENCE",
    "forest": "FOREST_AMBIENCE",
    "crowded_room": "CROWDED_ROOM",
    "hold_music": "HOLD_MUSIC",
}
TurnDetection = Literal["model", "vad"]
NoiseCancellation = Literal["telephony", "none"]
VOICE_KEYS = (
    "tts",
    "stt",
    "llm",
    "turn_detection",
    "endpointing",
    "interruption",
    "background_audio",
    "noise_cancellation",
)


_T = TypeVar("_T")
FIELD_MERGED = ("endpointing", "interruption", "background_audio")  # merged field by field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _known(kind: str, name: _T, known: tuple[str, ...] | list[str]) -> _T:
    if isinstance(name, str) and name not in known:
        raise ValueError(f"unknown {kind} '{name}'{did_you_mean(name, known)}: one of {', '.join(known)}")
    return name


class TtsChoice(_Strict):
    """One text-to-speech provider; ``voice`` and ``language`` as the provider names them."""

    provider: str
    model: str | None = Field(None, min_length=1, max_length=100)
    voice: str | None = Field(None, min_length=1, max_length=200)
    language: str | None = Field(None, min_length=2, max_length=20)

    @field_validator("provider")
    @classmethod
    def _provider(cls, v: str) -> str:
        return _known("TTS provider", v, TTS_PROVIDERS)


class SttChoice(_Strict):
    """One speech-to-text provider. ``keywords``: words it should expect (names, products),
    given to livekit as the session's key terms."""

    provider: str
    model: str | None = Field(None, min_length=1, max_length=100)
    language: str | None = Field(None, min_length=2, max_length=20)
    keywords: list[str] = Field(default_factory=list, max_length=100)

    @field_validator("provider")
    @classmethod
    def _provider(cls, v: str) -> str:
        return _known("STT provider", v, STT_PROVIDERS)


class LlmChoice(_Strict):
    """The LLM's model and temperature, on the deployment's OpenAI-compatible server
    (``RINGFLOW_OPENAI_BASE_URL``); an unset key keeps the settings' (``RINGFLOW_LLM_MODEL``)."""

    model: str | None = Field(None, min_length=1, max_length=100)
    temperature: float | None = Field(None, ge=0, le=2)


class Endpointing(_Strict):
    """How long after the caller stops the turn may end (``min_delay_s``) and must end
    (``max_delay_s``, when the end-of-turn model thinks they will go on)."""

    min_delay_s: float | None = Field(None, ge=0, le=10)
    max_delay_s: float | None = Field(None, gt=0, le=30)

    @model_validator(mode="after")
    def _order(self) -> Endpointing:
        low, high = self.min_delay_s, self.max_delay_s
        if low is not None and high is not None and high < low:
            raise ValueError(f"max_delay_s ({self.max_delay_s}) is below min_delay_s ({self.min_delay_s})")
        return self


class Interruption(_Strict):
    """What counts as the caller interrupting the agent: speech at least ``min_duration_s``
    long and, where there is an STT, at least ``min_words`` words."""

    min_duration_s: float | None = Field(None, ge=0, le=10)
    min_words: int | None = Field(None, ge=0, le=20)


DEFAULT_VOLUME = 0.8


class BackgroundAudio(_Strict):
    """livekit's ``BackgroundAudioPlayer``: ``thinking`` plays while the agent thinks (an
    LLM or a function running), ``ambient`` under the whole node; ``volume`` 0 to 1, or
    ``DEFAULT_VOLUME`` where no level names it (unset rather than defaulted, so a node that
    names only a sound keeps its flow's volume)."""

    thinking: str | None = None
    ambient: str | None = None
    volume: float | None = Field(None, ge=0, le=1)

    @property
    def loudness(self) -> float:
        return DEFAULT_VOLUME if self.volume is None else self.volume

    @field_validator("thinking")
    @classmethod
    def _thinking(cls, v: str | None) -> str | None:
        return _known("thinking sound", v, list(THINKING_SOUNDS))

    @field_validator("ambient")
    @classmethod
    def _ambient(cls, v: str | None) -> str | None:
        return _known("ambient sound", v, list(AMBIENT_SOUNDS))


def _as_list(v: Any) -> Any:
    """One provider or a list of them (failover, in order): always a list inside."""
    return [v] if isinstance(v, dict) else v


class VoiceSettings(_Strict):
    """A flow's or a node's ``voice:``. Every key is optional: unset, the node takes the
    flow's, and the flow the deployment's (``RINGFLOW_TTS``, ``RINGFLOW_STT``, ...).
    ``tts``, ``stt`` and ``llm`` take one provider or a list, tried in that order (livekit's
    ``FallbackAdapter``). ``noise_cancellation`` is the call's, set at the flow level: LiveKit
    applies it to the room's audio input when the session starts (``telephony``: LiveKit
    Cloud's BVC telephony filter, which needs LiveKit Cloud)."""

    tts: list[TtsChoice] | None = Field(None, min_length=1, max_length=4)
    stt: list[SttChoice] | None = Field(None, min_length=1, max_length=4)
    llm: list[LlmChoice] | None = Field(None, min_length=1, max_length=4)
    turn_detection: TurnDetection | None = None
    endpointing: Endpointing | None = None
    interruption: Interruption | None = None
    background_audio: BackgroundAudio | None = None
    noise_cancellation: NoiseCancellation | None = None

    @field_validator("tts", "stt", "llm", mode="before")
    @classmethod
    def _one_or_list(cls, v: Any) -> Any:
        return _as_list(v)

    def over(self, base: VoiceSettings | None) -> VoiceSettings:
        """These settings laid over ``base``, key by key: a provider list set here replaces
        the base's whole; ``endpointing``, ``interruption`` and ``background_audio`` field by
        field (a node that names only ``min_delay_s`` keeps the flow's ``max_delay_s``)."""
        if base is None:
            return self
        mine: dict[str, Any] = {}
        for key in VOICE_KEYS:
            value = getattr(self, key)
            if value is None:
                continue
            under = getattr(base, key)
            if key in FIELD_MERGED and under is not None:
                # what the node names (not ``model_fields_set``: a definition that went through
                # JSON, as a call's does, names every field, unset ones as null)
                named = {f: v for f in type(value).model_fields if (v := getattr(value, f)) is not None}
                value = under.model_copy(update=named)
            mine[key] = value
        return base.model_copy(update=mine)


NO_VOICE = VoiceSettings()


def voice_for(flow_voice: VoiceSettings | None, node_voice: VoiceSettings | None) -> VoiceSettings:
    """A node's effective voice settings: its own over the flow's."""
    if node_voice is None:
        return flow_voice or NO_VOICE
    return node_voice.over(flow_voice)
