"""The agent's side of supervisors: the call's ``supervision`` (kept by its workflow,
``workflows/supervision.py``) polled, and each action not applied yet handed to the
controller in order (``FlowController.on_supervisor``), which applies it to its engine,
reports it at that point of its events and pauses, prompts or resumes the bot.

A query, not a signal to the agent: the workflow cannot reach an agent, and a query adds
nothing to the call's history. Each query is a billable action in Temporal Cloud, so with
Redis the read waits for a supervisor command's nudge (``agents/supervision_nudge.py``) and
polls only as a slow backstop. ``poll`` is also what a simulation calls right after it
took an action, so its next line meets the bot already paused (no sleep to wait on).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

from ringflow.agents.supervision_nudge import Nudges
from ringflow.contract.supervision import Supervision, SupervisorStep

log = logging.getLogger(__name__)
SUPERVISOR_POLL_S = 1.0  # how soon a whisper, takeover or hand-back reaches the bot
# With Redis nudges (agents/supervision_nudge.py) the read waits for a nudge, at most this long
SUPERVISOR_BACKSTOP_S = 15.0


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
    def __init__(
        self,
        controller: SupervisedController,
        every_s: float = SUPERVISOR_POLL_S,
        *,
        nudges: Nudges | None = None,
        backstop_s: float = SUPERVISOR_BACKSTOP_S,
    ) -> None:
        self.controller = controller
        self.every_s = every_s
        self.nudges = nudges  # a supervisor's command wakes the read (agents/supervision_nudge.py)
        self.backstop_s = backstop_s
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
        try:
            if self.nudges is not None:
                try:
                    await self.nudges.open()
                except Exception as exc:  # no Redis for this call: read on the clock instead
                    log.warning("supervision nudges unavailable (%s): polling", type(exc).__name__)
                    await self.nudges.close()
                    self.nudges = None
            while not c.dead and not c.state.ended:
                try:
                    await self.poll()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the workflow away: the next poll asks again
                    with contextlib.suppress(Exception):
                        log.debug("supervision poll failed: %s", type(exc).__name__)
                await self._until_next()
        finally:
            if self.nudges is not None:
                await self.nudges.close()

    async def _until_next(self) -> None:
        """A nudge or the backstop with a subscription; the poll's period without one (or
        once the subscription broke)."""
        if self.nudges is None:
            await asyncio.sleep(self.every_s)
            return
        try:
            await self.nudges.wait(self.backstop_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("supervision nudges lost (%s): polling", type(exc).__name__)
            await self.nudges.close()
            self.nudges = None
