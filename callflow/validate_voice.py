"""Validation rules for ``voice:`` beyond its shape (``callflow/voice.py`` checks names and
providers): what a node may override, and what a provider needs to be built."""

from __future__ import annotations

from ringflow.callflow.errors import Issue
from ringflow.callflow.model import Flow
from ringflow.callflow.validate_checker import Checker
from ringflow.callflow.voice import VoiceSettings

# LiveKit Inference names an STT model "provider/model": there is no provider-wide default
STT_MODEL_EXAMPLE = {
    "deepgram": "nova-3",
    "cartesia": "ink-whisper",
    "assemblyai": "universal-streaming",
    "xai": "stt-1",
    "speechmatics": "enhanced",
    "inworld": "inworld-stt-1",
    "google": "gemini-3.5-transcribe-live",
}


def _check(checker: Checker, path: str, voice: VoiceSettings) -> None:
    for i, choice in enumerate(voice.stt or []):
        if choice.provider != "openai" and choice.model is None:
            example = STT_MODEL_EXAMPLE.get(choice.provider, "...")
            checker.err(
                f"{path}.stt[{i}].model",
                f"an STT of {choice.provider} needs its model (LiveKit Inference names it "
                f"{choice.provider}/MODEL), e.g. model: {example}",
            )
    for key in ("tts", "stt", "llm"):
        entries = getattr(voice, key) or []
        seen = [e.model_dump() for e in entries]
        for i, entry in enumerate(seen):
            if entry in seen[:i]:
                checker.warn(
                    f"{path}.{key}[{i}]",
                    f"the same {key.upper()} as an earlier entry: failover to it changes nothing",
                )


def check_voice(checker: Checker, flow: Flow) -> None:
    if flow.voice is not None:
        _check(checker, "voice", flow.voice)
    for nid, node in flow.nodes.items():
        voice = node.voice
        if voice is None:
            continue
        path = f"nodes.{nid}.voice"
        _check(checker, path, voice)
        if voice.noise_cancellation is not None:
            checker.err(
                f"{path}.noise_cancellation",
                "noise_cancellation is the call's, set in the flow's voice: LiveKit applies it to "
                "the room's audio input when the session starts, not per node",
            )
        listens = voice.stt or voice.turn_detection or voice.endpointing or voice.interruption
        if node.type == "end" and listens:
            checker.warn(path, "an end node does not listen: only its tts, llm and background_audio apply")


def voice_notes(flow: Flow) -> list[Issue]:
    """What a flow's ``voice`` asks for that only some deployments have: said, not refused."""
    if flow.voice is not None and flow.voice.noise_cancellation == "telephony":
        return [
            Issue(
                "voice.noise_cancellation",
                "telephony noise cancellation runs only on LiveKit Cloud, with "
                "livekit-plugins-noise-cancellation installed on the agent (Ringflow does not "
                "install it); elsewhere the call runs unfiltered and the agent logs "
                "noise_cancellation_missing",
                "note",
            )
        ]
    return []
