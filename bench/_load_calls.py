"""The load bench's calls (imported by bench/load.py; not a bench): the issue's traffic
for one call, sent as Ringflow's agent sends it or as the raw-signal design would.

Ringflow's calls go through the agent's real ``Outbox`` and ``workflow_sender`` with the
agent's settings (coalescing, ``agents/runner.py``), journaled in Redis when given a client;
the raw design sends every event as its own signal into ``LoadBaseline``.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from typing import Any

from _load_measure import timeline
from temporalio.client import WorkflowHandle

from ringflow.agents.journal import OutboxJournal
from ringflow.agents.outbox import Outbox, OutboxClosed, OutboxFull
from ringflow.agents.runner import LINGER_S
from ringflow.agents.signals import DeferredTransition, workflow_sender
from ringflow.contract.events import HangupEvent, Heartbeat, Turn, TurnsEvent
from ringflow.settings import get_settings
from ringflow.workflows.client import CallHandle

PERIOD_S = 5.0  # a heartbeat, and a user turn, a reply and maybe a transition, every ~5 s
# The agent's heartbeat as its settings make it: 5 s, or the 60 s backstop once LiveKit's
# webhooks report lost agents (RINGFLOW_LIVEKIT_WEBHOOKS=1); calls time out accordingly.
AGENT = get_settings()
# Calls on a line start at random times: each call's traffic starts at a random point of
# the longest period in it (the heartbeat, which is also how long a journaled turn may
# linger), and the window opens once every call talks. Started within one 5 s period,
# a thousand calls' lingering turns came due together every 20 s: waves of backlog that
# a line of real calls, started over minutes, does not make.
STAGGER_S = max(PERIOD_S, AGENT.heartbeat_s)
USER = "Yes, Tuesday at ten works for me, and could you send the confirmation by text?"
ASSISTANT = "Done: Tuesday at ten. I'll text you the confirmation in a minute. Anything else?"


class RingflowCall:
    """One CallWorkflow fed as the agent feeds it: through its outbox, never awaited; with
    ``redis``, journaled as an agent with ``RINGFLOW_REDIS_URL`` journals (agents/runner.py)."""

    def __init__(self, call: CallHandle, redis: Any = None) -> None:
        self.call = call
        journal = OutboxJournal(redis, call.call_id) if redis is not None else None
        self.outbox = Outbox(
            workflow_sender(call),
            linger_s=min(LINGER_S, AGENT.heartbeat_s),
            heartbeat_quiet_s=AGENT.heartbeat_s,
            journal=journal,
            journaled_linger_s=AGENT.heartbeat_s if journal is not None else 0.0,
        )
        if journal is not None:
            journal.on_unhealthy = self.outbox.kick
        self.seq = 0
        self.turns = 0
        self.node = "ping"
        self.broken = False  # the outbox stopped (the workflow ended under the call): a wrong end

    def put(self, event: Any) -> None:
        try:
            self.outbox.put(event)
        except (OutboxClosed, OutboxFull):
            self.broken = True

    def turn(self, role: str, text: str) -> None:
        self.seq += 1
        self.turns += 1
        now = time.time()
        self.put(
            TurnsEvent(
                event_id=f"{role}-{self.seq}",
                seq=self.seq,
                at=now,
                items=[Turn(role=role, text=text, node=self.node, started_at=now, ended_at=now)],
            )
        )  # type: ignore[arg-type]

    def transition(self, name: str = "flip") -> None:
        self.seq += 1
        self.put(DeferredTransition((f"t{self.seq}", 0, self.seq, self.node, name, {}, time.time(), None)))  # type: ignore[arg-type]
        self.node = {"ping": "pong", "pong": "ping"}.get(self.node, self.node)

    def heartbeat(self) -> None:
        self.put(Heartbeat(agent_id="bench-agent", at=time.time()))

    async def finish(self, waits: asyncio.Semaphore) -> str | None:
        """None when the call ended right, else what went wrong (counted by kind)."""
        self.transition("finish")
        self.put(HangupEvent(event_id="hangup", reason="completed", at=time.time()))
        await self.outbox.close(flush_timeout=60)
        async with waits:
            rec = await self.call.handle.result()
        said = [t for t in rec.transcript if t.get("role") in ("user", "assistant")]
        if self.broken or rec.end_reason != "completed":  # the call ended under the bench: how
            print(f"{self.call.call_id} ended {rec.end_reason}:", file=sys.stderr)
            print(await timeline(self.call.handle), file=sys.stderr)
        if self.broken:
            return f"outbox_stopped_{rec.end_reason}"
        if rec.end_reason != "completed":
            return f"ended_{rec.end_reason}"
        return None if len(said) == self.turns else "turns_missing"


class RawCall:
    """The raw design: each event its own signal, sent at once, appended to a list."""

    def __init__(self, handle: WorkflowHandle[Any, Any]) -> None:
        self.handle = handle
        self.tasks: set[asyncio.Task[None]] = set()
        self.sent = 0
        self.failed = 0

    def _signal(self, kind: str, **extra: Any) -> None:
        self.sent += 1
        task = asyncio.get_running_loop().create_task(self._send({"type": kind, "at": time.time(), **extra}))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _send(self, body: dict[str, Any]) -> None:
        try:
            await self.handle.signal("event", body)
        except Exception:
            self.failed += 1

    def turn(self, role: str, text: str) -> None:
        self._signal("turns", role=role, text=text)

    def transition(self, name: str = "flip") -> None:
        self._signal("transition", name=name)

    def heartbeat(self) -> None:
        self._signal("heartbeat")

    async def finish(self, waits: asyncio.Semaphore) -> str | None:
        self._signal("hangup")
        await asyncio.gather(*list(self.tasks))
        await self.handle.signal("stop")
        if self.failed:
            return "signal_failed"
        async with waits:
            got = await self.handle.result()
        return None if got == self.sent else "events_missing"


async def drive(call: RingflowCall | RawCall, stop_at: float, rng: random.Random) -> None:
    """The issue's traffic for one call until ``stop_at``, from a random phase."""
    loop = asyncio.get_running_loop()

    async def heartbeats() -> None:
        await asyncio.sleep(rng.uniform(0, STAGGER_S))
        while loop.time() < stop_at:
            call.heartbeat()
            await asyncio.sleep(PERIOD_S)

    async def talk() -> None:
        await asyncio.sleep(rng.uniform(0, STAGGER_S))
        while loop.time() < stop_at:
            call.turn("user", USER)
            await asyncio.sleep(rng.uniform(0.5, 1.5))  # the reply comes after the LLM and TTS
            if rng.random() < 0.25:
                call.transition()
            call.turn("assistant", ASSISTANT)
            await asyncio.sleep(rng.uniform(0.8, 1.2) * PERIOD_S - 1.0)

    await asyncio.gather(heartbeats(), talk())
