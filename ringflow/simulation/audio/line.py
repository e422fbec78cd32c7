"""One simulated phone line on real audio: the caller's microphone and loudspeaker, and what
the session says about turns, kept on one clock (``time.perf_counter()``).

livekit backdates its user-state timestamps (speech start is dated to the VAD's first
speech frame, not when it was detected), so turn timings are taken here, from the audio
this line played and heard, not from livekit's events.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from livekit.agents import AgentSession
from livekit.agents import llm as lk_llm

from ringflow.simulation.audio.background import SimulatedRoom
from ringflow.simulation.audio.microphone import Microphone
from ringflow.simulation.audio.speaker import Speaker


@dataclass
class Heard:
    """What the session reported, in order, with this line's clock."""

    kind: str  # user_turn | agent_state | user_state | false_interruption
    at: float
    value: Any


@dataclass
class AudioLine:
    """The audio of one agent's session (a new agent after a kill gets a new line)."""

    mic: Microphone = field(default_factory=Microphone)
    speaker: Speaker = field(default_factory=Speaker)
    room: SimulatedRoom = field(default_factory=SimulatedRoom)  # the background sounds' track
    heard: list[Heard] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    session: AgentSession | None = None

    def attach(self, session: AgentSession) -> None:
        """Put this line in place of a room (before ``session.start``)."""
        self.session = session
        session.input.audio = self.mic
        session.output.audio = self.speaker
        session.on("conversation_item_added", self._item)
        session.on("agent_state_changed", lambda ev: self._note("agent_state", ev.new_state))
        session.on("user_state_changed", lambda ev: self._note("user_state", ev.new_state))
        session.on("agent_false_interruption", lambda ev: self._note("false_interruption", ev.resumed))

    def _item(self, ev: Any) -> None:
        item = ev.item
        if isinstance(item, lk_llm.ChatMessage) and item.role == "user":
            self._note("user_turn", item.text_content or "")

    def _note(self, kind: str, value: Any) -> None:
        self.heard.append(Heard(kind, time.perf_counter(), value))
        self._poke()

    def _poke(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    def since(self, at: float, kind: str) -> list[Heard]:
        return [h for h in self.heard if h.at >= at and h.kind == kind]

    @property
    def agent_state(self) -> str:
        return self.session.agent_state if self.session is not None else "initializing"

    async def until(self, cond: Callable[[], bool], timeout: float) -> bool:
        """Wait for ``cond`` (re-checked on every event of the session or the speaker)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not cond():
            left = deadline - loop.time()
            if left <= 0:
                return False
            waits = {
                asyncio.ensure_future(self.changed.wait()),
                asyncio.ensure_future(self.speaker.changed.wait()),
            }
            await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            for w in waits:
                w.cancel()
        return True

    def quiet(self) -> bool:
        """The agent neither thinks nor speaks, and nothing of it is playing."""
        return self.agent_state in ("listening", "idle") and not self.speaker.active

    async def close(self) -> None:
        self.mic.close()
        await self.speaker.aclose()
        await self.room.ear.aclose()
