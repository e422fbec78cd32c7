"""How the caller's turns end (``settings.listen``, per node) and the empty inputs the agent
detects beside silence.

- ``auto``: livekit's turn detection (VAD and endpointing) as the session is built.
- ``manual``: push-to-talk. livekit's manual turn detection; the client starts and ends the
  caller's turn with the ``ringflow.talk`` RPC (payload ``start``, ``end`` or ``cancel``)
  or the ``ringflow.talk`` participant attribute (``start``/``end``). A turn ended with
  nothing said is an ``empty_turn``.
- ``realtime``: livekit's preemptive generation, LLM and TTS, so the reply is ready when
  the caller stops; barge-in stays on (validation refuses ``allow_interrupt: false`` there).

Speech that livekit hears but transcribes to nothing never becomes a user turn (livekit
drops it silently); :class:`EmptySpeechWatch` turns it into an ``empty_transcript`` input.
The engine counts every kind toward the idle rule (``callflow/idle.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from ringflow.agents.controller import FlowController
from ringflow.callflow.model import ListenMode

log = logging.getLogger(__name__)
TALK_RPC = "ringflow.talk"  # also the attribute's name
EMPTY_SPEECH_GRACE_S = 4.0  # past livekit's max endpointing delay (3 s): no words are coming


def apply_listen(agent: Any, mode: ListenMode) -> None:
    """Set the node's listen mode on the one agent of the call. Only a change touches the
    session: a call that stays ``auto`` runs exactly as before."""
    current: ListenMode = getattr(agent, "listen_mode", "auto")
    if mode == current:
        return
    agent.listen_mode = mode
    # livekit reads the agent's turn handling at every turn (agent_activity's
    # preemptive_generation_opts merges it over the session's); there is no public setter
    handling = getattr(agent, "_turn_handling", None)
    if isinstance(handling, dict):
        if mode == "realtime":
            handling["preemptive_generation"] = {"enabled": True, "preemptive_tts": True}
        elif mode == "manual":
            handling["preemptive_generation"] = {"enabled": False}
        else:
            handling.pop("preemptive_generation", None)
    if (mode == "manual") != (current == "manual"):
        try:
            # back from push-to-talk: the session's own turn detection (its turn detector model,
            # if it has one), not None, which would make livekit choose again without it
            agent.turn_detection = "manual" if mode == "manual" else _session_turn_detection(agent)
        except Exception as exc:  # a session without audio (text mode) has no turn detection to switch
            log.debug("turn detection not switched to %s: %s", mode, exc)


def _session_turn_detection(agent: Any) -> Any:
    asked = getattr(agent, "voice_turn_detection", None)  # the node's voice.turn_detection
    if asked is not None:
        return asked
    try:
        return agent.session.turn_detection
    except RuntimeError:  # not running yet: nothing was switched on it
        return None


class PushToTalk:
    """The client's push-to-talk on a ``manual`` node: ``start`` interrupts the bot and
    opens a turn, ``end`` commits it (the reply follows, or an ``empty_turn`` when nothing
    was said), ``cancel`` drops it."""

    def __init__(self, session: Any, controller: FlowController, port: Any) -> None:
        self.session = session
        self.controller = controller
        self.port = port
        self.open = False

    def listening_manually(self) -> bool:
        return getattr(self.port.agent, "listen_mode", "auto") == "manual"

    async def handle(self, command: str) -> str:
        """One RPC or attribute value; the answer is what happened, for the client."""
        command = command.strip().lower()
        if self.controller.ended or self.controller.dead:
            return "ended"
        if not self.listening_manually():
            return "ignored: this node does not listen push-to-talk"
        if command == "start":
            await self.start()
            return "listening"
        if command == "end":
            return "empty" if not (await self.end()) else "heard"
        if command == "cancel":
            self.clear()
            return "cancelled"
        return f"unknown command {command[:20]!r}: use start, end or cancel"

    async def start(self) -> None:
        with contextlib.suppress(RuntimeError):
            self.session.interrupt()
        self.clear()
        self.open = True

    def clear(self) -> None:
        self.open = False
        with contextlib.suppress(RuntimeError):
            self.session.clear_user_turn()

    async def end(self) -> str:
        """Commit the turn; its transcript ('' when nothing was said). livekit answers words
        as any turn; an empty turn gets no reply (``FlowAgent.on_user_turn_completed``
        stops it) but the idle rule's prompt."""
        self.open = False
        try:
            text = await self.session.commit_user_turn()
        except RuntimeError:
            text = ""
        if (text or "").strip():
            return text
        await self.controller.on_idle("empty_turn")
        return ""


class EmptySpeechWatch:
    """Speech with no words: the caller spoke (``speaking`` then ``listening``) and no user
    turn came within the grace period. Not on ``manual`` nodes, where ``end`` decides."""

    def __init__(self, controller: FlowController, agent: Any, grace_s: float = EMPTY_SPEECH_GRACE_S) -> None:
        self.controller = controller
        self.agent = agent
        self.grace_s = grace_s
        self.turns = 0  # user turns seen
        self.speaking_from: int | None = None  # the turn count when the caller began speaking
        self.timer: asyncio.Task[None] | None = None

    def user_turn(self) -> None:
        self.turns += 1

    def user_state(self, new_state: str) -> None:
        if new_state == "speaking":
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            if self.speaking_from is None:
                self.speaking_from = self.turns
        elif new_state in ("listening", "away") and self.speaking_from is not None:
            since, self.speaking_from = self.speaking_from, None
            if getattr(self.agent, "listen_mode", "auto") != "manual":
                self.timer = asyncio.get_running_loop().create_task(self._check(since))

    async def _check(self, since: int) -> None:
        if self.grace_s > 0:
            await asyncio.sleep(self.grace_s)  # the transcript's time to arrive, not a sync
        self.timer = None
        if self.turns == since and self.speaking_from is None and not self.controller.ended:
            await self.controller.on_idle("empty_transcript")

    def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()


def watch_talk(room: Any, talk: PushToTalk) -> None:
    """The client's push-to-talk in a LiveKit room: the ``ringflow.talk`` RPC (answered with
    what happened) or the participant attribute of the same name."""
    tasks: set[asyncio.Task[str]] = set()

    async def on_rpc(data: Any) -> str:
        return await talk.handle(str(data.payload or ""))

    room.local_participant.register_rpc_method(TALK_RPC, on_rpc)

    @room.on("participant_attributes_changed")
    def _changed(changed: dict[str, str], participant: Any) -> None:
        if TALK_RPC in changed:
            task = asyncio.get_running_loop().create_task(talk.handle(changed[TALK_RPC]))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
