"""A flow's ``voice:`` settings on the live call: applied at the start and on every transition.

There is one agent and one session for the whole call (``agents/flow_agent.py``), so a node's
settings are swapped in place, as livekit-agents 1.8 lets a running agent do:
``Agent.update_options(stt=, llm=, tts=)`` switches the models of the live pipeline (the next
reply speaks with the new TTS; nothing already playing is cut, so there is no audio gap),
``AgentSession.update_options`` the endpointing delays and the STT's key terms, the agent's
``turn_detection`` the turn detection. The interruption thresholds have no setter: livekit
reads them from the session's options at each interruption, so they are set there.

A list of providers becomes livekit's ``FallbackAdapter`` (STT, LLM and TTS), tried in order.
What is built from a choice comes from a :class:`VoiceStack`: production's
(``agents/voice_providers.py``: the OpenAI plugin and LiveKit Inference) or the audio
simulator's offline one (``simulation/audio/stack.py``). Built objects are kept per choice,
so a node that comes back to a provider reuses its connection.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from livekit.agents import AgentSession
from livekit.agents import llm as lk_llm
from livekit.agents import stt as lk_stt
from livekit.agents import tts as lk_tts

from ringflow.callflow.model import Flow
from ringflow.callflow.voice import (
    NO_VOICE,
    VOICE_KEYS,
    BackgroundAudio,
    LlmChoice,
    NoiseCancellation,
    SttChoice,
    TtsChoice,
    TurnDetection,
    VoiceSettings,
    voice_for,
)

log = logging.getLogger(__name__)


class VoiceStack(Protocol):
    """Builds what a choice names. ``None``: this stack has no such model (text mode has no
    speech), and the session keeps its own."""

    def tts(self, choice: TtsChoice) -> lk_tts.TTS | None: ...
    def stt(self, choice: SttChoice) -> lk_stt.STT | None: ...
    def llm(self, choice: LlmChoice) -> lk_llm.LLM | None: ...
    def turn_detector(self, mode: TurnDetection) -> Any: ...
    def background(self, sounds: BackgroundAudio | None, session: AgentSession) -> None: ...
    def room_options(self, noise: NoiseCancellation | None) -> Any: ...


def node_voice(flow: Flow, node: str | None) -> VoiceSettings:
    """The settings in force on ``node``: its own over the flow's."""
    own = flow.nodes[node].voice if node is not None and node in flow.nodes else None
    return voice_for(flow.voice, own)


class VoiceControl:
    """The call's voice settings as applied to its session, node after node.

    ``defaults`` are the session's own values before any flow setting (the deployment's),
    restored on a node whose settings no longer name a key."""

    def __init__(self, stack: VoiceStack, flow: Flow, session: AgentSession) -> None:
        self.stack = stack
        self.flow = flow
        self.session = session
        self.applied = NO_VOICE  # what the session runs now: its own, until a node sets more
        self.built: dict[tuple[str, str], Any] = {}  # (kind, the choices' JSON) -> model
        opts = session.options
        self.default_endpointing: dict[str, Any] = dict(opts.endpointing)
        self.default_interruption: dict[str, Any] = dict(opts.interruption)
        self.turn_detection: Any = None  # what the settings ask for; None: the session's own

    def apply(self, agent: Any, node: str | None) -> VoiceSettings:
        """Put ``node``'s settings on ``agent`` and the session; only what changed is touched,
        so a call whose flow sets no voice runs exactly as before."""
        want = node_voice(self.flow, node)
        before = self.applied
        if before == want:
            return want
        self.applied = want
        changed = {k for k in VOICE_KEYS if getattr(before, k) != getattr(want, k)}
        models: dict[str, Any] = {}
        if "tts" in changed and (m := self._model("tts", want.tts)) is not None:
            models["tts"] = m
        if "stt" in changed and (m := self._model("stt", want.stt)) is not None:
            models["stt"] = m
        if "llm" in changed and (m := self._model("llm", want.llm)) is not None:
            models["llm"] = m
        if models:
            agent.update_options(**models)
        if "stt" in changed:
            words = [w for c in want.stt or [] for w in c.keywords]
            self.session.update_options(keyterms=list(dict.fromkeys(words)))
        if "endpointing" in changed:
            e = want.endpointing
            ends = dict(self.default_endpointing)
            if e is not None and e.min_delay_s is not None:
                ends["min_delay"] = e.min_delay_s
            if e is not None and e.max_delay_s is not None:
                ends["max_delay"] = e.max_delay_s
            self.session.update_options(endpointing_opts=ends)  # type: ignore[arg-type]
        if "interruption" in changed:
            i = want.interruption
            live = self.session.options.interruption  # read at every interruption: no setter
            live["min_duration"] = self.default_interruption["min_duration"]
            live["min_words"] = self.default_interruption["min_words"]
            if i is not None and i.min_duration_s is not None:
                live["min_duration"] = i.min_duration_s
            if i is not None and i.min_words is not None:
                live["min_words"] = i.min_words
        if "turn_detection" in changed:
            mode = want.turn_detection
            self.turn_detection = self.stack.turn_detector(mode) if mode is not None else None
            agent.voice_turn_detection = self.turn_detection  # where push-to-talk returns to
            if getattr(agent, "listen_mode", "auto") != "manual":  # push-to-talk wins on its node
                agent.turn_detection = (
                    self.turn_detection if self.turn_detection is not None else self.session.turn_detection
                )
        if "background_audio" in changed:
            self.stack.background(want.background_audio, self.session)
        return want

    def _model(self, kind: str, choices: list[Any] | None) -> Any:
        """The model for a list of choices (a ``FallbackAdapter`` over two or more); with no
        choices the session's own (``None`` to ``update_options`` would switch it off)."""
        if not choices:
            return getattr(self.session, kind)
        key = (kind, "|".join(c.model_dump_json() for c in choices))
        if key in self.built:
            return self.built[key]
        build = getattr(self.stack, kind)
        parts = [build(c) for c in choices]
        if any(p is None for p in parts):
            return None
        model: Any
        if len(parts) == 1:
            model = parts[0]
        elif kind == "tts":
            model = lk_tts.FallbackAdapter(parts)
        elif kind == "stt":
            model = lk_stt.FallbackAdapter(parts, vad=self.session.vad)
        else:
            model = lk_llm.FallbackAdapter(parts)
        self.built[key] = model
        return model
