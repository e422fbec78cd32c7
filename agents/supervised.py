"""The agent's side of supervisors: the call's ``supervision`` (kept by its workflow,
``workflows/supervision.py``) polled, and each action not applied yet handed to the
controller in order (``FlowController.on_supervisor``), which applies it to its engine,
reports it at that point of its events and pauses, prompts or resumes the bot.

A query, not a signal to the agent: the workflow cannot reach an agent, and a query adds
nothing to the call's history. ``poll`` is also what a simulation calls right after it
took an action, so its next line meets the bot already paused (no sleep to wait on).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

from ringflow.contract.supervision import Supervision, SupervisorStep

log = logging.getLogger(__name__)
SUPERVISOR_POLL_S = 1.0  # how soon a whisper, takeover or hand-back reaches the bot


class _Call(Protocol):
    async def supervision(self) -> Supervision: ...


class _State(Protocol):
    supervisor_seen: int
    ended: bool


class SupervisedController(Protocol):
    """What the feed uses of ``agents/controller.FlowController``."""

    dead: bool
    paused_s: float

    @property
    def call(self) -> _Call: ...
    @property
    def state(self) -> _State: ...

    async def on_supervisor(self, step: SupervisorStep) -> None: ...


class SupervisorFeed:
    def __init__(self, controller: SupervisedController, every_s: float = SUPERVISOR_POLL_S) -> None:
        self.controller = controller
        self.every_s = every_s
        self.lock = asyncio.Lock()  # the loop's poll and a simulation's never interleave

    async def poll(self) -> None:
        """Once: the supervision read, what this agent has not applied applied in order."""
        async with self.lock:
            c = self.controller
            if c.dead or c.state.ended:
                return
            sup = await c.call.supervision()
            c.paused_s = sup.paused_s
            for step in sup.after(c.state.supervisor_seen):
                await c.on_supervisor(step)

    async def run(self) -> None:
        c = self.controller
        while not c.dead and not c.state.ended:
            try:
                await self.poll()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the workflow away: the next poll asks again
                with contextlib.suppress(Exception):
                    log.debug("supervision poll failed: %s", type(exc).__name__)
            await asyncio.sleep(self.every_s)
