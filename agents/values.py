"""The agent's side of extracted values: each running extraction's result reaches its engine.

The workflow extracts a node's values when the call leaves it; the agent's engine holds the
same extraction as running (``CallState.extracting``) from that step on. For each one, this
asks the workflow for the result (the ``values`` update, which answers once the result is
known, within ``EXTRACTION_TIMEOUT_S``), applies it to the agent's engine and reports where
it did with a sequenced ``extracted`` event, which the workflow applies at the same point of
the agent's events: both engines take the result at the same step, and nothing renders or
routes on a value before it is known (the engine waits there, ``Draft.wait``). An entry that
waits is resumed by the result; ``arrived`` lets the hot path await that.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Protocol

from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError

from ringflow.agents.outbox import Outbox
from ringflow.callflow.draft import waits_for
from ringflow.callflow.engine import Engine
from ringflow.callflow.state import CallState, extraction_node
from ringflow.contract.updates import EXTRACTION_TIMEOUT_S, ValuesAnswer
from ringflow.workflows.client import CallHandle


class ValuesUser(Protocol):
    """What collecting values uses of the controller (``agents/controller.FlowController``,
    which owns a ``Values``: a Protocol, so the import runs one way)."""

    call: CallHandle
    engine: Engine
    state: CallState
    seq: int
    outbox: Outbox
    dead: bool
    epoch: int | None  # this attach's epoch, sent with every update

    def refused(self, exc: BaseException) -> bool: ...
    async def apply_extraction(self, answer: ValuesAnswer) -> None: ...


log = logging.getLogger(__name__)
UNREACHABLE = "the call's workflow could not be reached for the extracted values"
# the agent's own bound: the workflow answers within the extraction's timeout (and a margin)
WAIT_S = EXTRACTION_TIMEOUT_S + 15


class Values:
    def __init__(self, controller: ValuesUser) -> None:
        self.ctrl = controller
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.live = False  # started once the agent's session runs (``start``)
        self.changed = asyncio.Event()

    def start(self) -> None:
        self.live = True
        self.watch()

    def watch(self) -> None:
        """Collect every extraction the agent's state holds as running and nobody collects."""
        ctrl = self.ctrl
        if not self.live or ctrl.dead or ctrl.state.ended:
            return
        for xid in ctrl.state.extracting:
            if xid not in self.tasks:
                task = asyncio.get_running_loop().create_task(self.collect(xid, ctrl.seq))
                self.tasks[xid] = task

    async def collect(self, xid: str, after_seq: int) -> None:
        try:
            answer = await self.fetch(xid, after_seq)
            if answer is not None and not answer.gone:
                await self.ctrl.apply_extraction(answer)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a stopped agent, a closed outbox: this agent is done with it
            log.warning("extraction %s not applied: %s", extraction_node(xid), type(exc).__name__)
        finally:
            self.tasks.pop(xid, None)
            self.changed.set()

    async def fetch(self, xid: str, after_seq: int) -> ValuesAnswer | None:
        """The workflow's answer; after ``WAIT_S`` of failed asks, the error both sides then
        take (the ``extracted`` event carries it, so the workflow applies the same)."""
        ctrl = self.ctrl
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_S
        delay = 0.2
        ctrl.outbox.kick()  # the update waits for the event that started the extraction
        while not ctrl.dead:
            try:
                return await ctrl.call.values(xid, after_seq=after_seq, epoch=ctrl.epoch)
            except (WorkflowUpdateFailedError, RPCError) as exc:
                if ctrl.refused(exc):  # a newer agent has the call: this one stops
                    return None
                if loop.time() + delay > deadline:
                    log.warning("extraction %s: %s", extraction_node(xid), type(exc).__name__)
                    return ValuesAnswer(id=xid, node=extraction_node(xid), error=UNREACHABLE)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
        return None

    async def until(self, done: Any) -> None:
        """Wait (bounded) until ``done()`` holds or the agent cannot go on."""
        ctrl = self.ctrl
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_S
        while not done() and not ctrl.dead and not ctrl.state.ended and self.live:
            self.watch()
            self.changed.clear()
            left = deadline - loop.time()
            if left <= 0:
                log.warning("gave up waiting for extracted values on node %s", ctrl.state.node)
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), left)

    async def arrived(self) -> None:
        """An entry waits for values (``CallState.waiting``): until their result resumed it."""
        await self.until(lambda: self.ctrl.state.waiting is None)

    async def known(self, names: frozenset[str]) -> None:
        """Until no running extraction gives one of ``names`` (a function's request reads them)."""
        ctrl = self.ctrl
        await self.until(lambda: not waits_for(ctrl.engine.flow, ctrl.state.extracting, names))

    def stop(self) -> None:
        for task in list(self.tasks.values()):
            task.cancel()
