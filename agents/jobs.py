"""The agent's side of background job groups (issue 15 §1; the workflow's is
``workflows/jobs.py``).

While a group runs, the agent reads the workflow's envelope log (query ``jobs_feed``): each
envelope goes into the LLM's context as a ``[jobs]`` system note (the transcript holds the
same line, so an agent taking over rebuilds the same context) and to the room as a LiveKit
data message on topic ``ringflow.jobs`` (one JSON envelope each) for a web or app client to
show. A finished group is routed with the ``route_jobs`` update after this agent's earlier
events, and its effects (the node its outcome leads to) are applied as a node function's
are; a group that leads nowhere gets a short LLM turn to tell the caller. While a
cancellable group runs the LLM is offered ``cancel_jobs``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from contextlib import AbstractContextManager
from typing import Any, Protocol

from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError

from ringflow.agents.device_tools import DeviceUser, offer
from ringflow.agents.hot_path import ToolOutcome
from ringflow.agents.values import Values
from ringflow.callflow.effects import EFFECTS_ADAPTER, Effect, SetNode, ToolSpec
from ringflow.callflow.events import Event
from ringflow.callflow.jobs import CANCEL_TOOL, ROOM_TOPIC, describe
from ringflow.callflow.state import CallState
from ringflow.contract.updates import CallFunctionResult, CancelRequest, RouteRequest

log = logging.getLogger(__name__)
POLL_S = 0.25  # while a group runs or waits to be routed
IDLE_POLL_S = 5.0  # otherwise: a group another agent started is found this soon
GROUP_DONE = (
    "Background work you started has finished ({outcome}). Tell the caller in one short "
    "sentence what it found, then carry on."
)
CANCEL_SPEC = ToolSpec(
    name=CANCEL_TOOL,
    description="Stop the background checks that are still running (when the caller no longer wants them).",
    parameters={"type": "object", "properties": {}, "required": [], "additionalProperties": False},
)


class JobsUser(DeviceUser, Protocol):
    """What the feed uses of the controller (``agents/controller.FlowController``, which
    owns a feed: a Protocol, so the import runs one way). A device's tools are offered
    beside ``cancel_jobs``, hence everything the device tools use too."""

    jobs: JobsFeed | None
    values: Values  # extraction results, collected for this engine (a route's gate waits)

    def awaiting_answer(self) -> AbstractContextManager[list[tuple[int, Event]]]: ...
    def rebased(
        self, state: CallState, applied_seq: int | None, moves: list[tuple[int, Event]]
    ) -> CallState: ...

    @property
    def dead(self) -> bool: ...
    @property
    def ended(self) -> bool: ...
    @property
    def node(self) -> str | None: ...
    def current_tools(self) -> SetNode | None: ...
    async def apply(self, effects: list[Effect]) -> None: ...


def has_jobs(controller: JobsUser) -> bool:
    return any(f.kind == "jobs" for n in controller.engine.flow.nodes.values() for f in n.functions.values())


def offer_cancel(controller: JobsUser, eff: SetNode) -> SetNode:
    """The node's tools plus ``cancel_jobs`` while a cancellable group runs."""
    feed = controller.jobs
    if feed is None or not feed.cancellable or any(t.name == CANCEL_TOOL for t in eff.tools):
        return eff
    return eff.model_copy(update={"tools": [*eff.tools, CANCEL_SPEC]})


class JobsFeed:
    def __init__(self, controller: JobsUser) -> None:
        self.ctrl = controller
        self.cursor = -1
        self.running: list[str] = []
        self.cancellable: list[str] = []
        self.interruptible: list[str] = []
        self.unrouted = 0
        self.poke = asyncio.Event()
        self.cancelled_by_llm: set[str] = set()
        self.unspoken: str | None = None
        self.run_id = ""
        self.tasks: set[asyncio.Task[Any]] = set()

    async def read(self, after: int) -> dict[str, Any]:
        out: dict[str, Any] = await self.ctrl.call.handle.query("jobs_feed", after)
        return out

    async def run(self) -> None:
        while not self.ctrl.dead and not self.ctrl.ended:
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the worker may be away for a moment: read again later
                log.warning("jobs feed: %s", type(exc).__name__)
                await asyncio.sleep(1.0)
                continue
            busy = self.running or self.unrouted
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.poke.wait(), POLL_S if busy else IDLE_POLL_S)

    async def prime(self) -> None:
        """An agent's first read, before its session starts: where the log is (the
        transcript gave this agent what came before), and the groups running, so a resumed
        LLM is offered ``cancel_jobs`` from its first turn."""
        feed = await self.read(-1)
        self.run_id = feed["run"]
        self.cursor = feed["next"]
        self.running, self.cancellable = feed["running"], feed["cancellable"]
        self.interruptible = feed["interruptible"]
        self.unspoken = feed["unspoken"]

    async def prime_or_later(self) -> None:
        """``prime`` at attach; a worker that cannot answer the query now must not stop the
        agent from attaching: the feed's loop primes it once it can."""
        try:
            await self.prime()
        except Exception as exc:
            log.warning("jobs feed not read at attach (%s): reading it later", type(exc).__name__)

    async def step(self) -> None:
        self.poke.clear()
        primed = self.cursor < 0  # not read at attach: the tools shown lack cancel_jobs
        if primed:
            await self.prime()
        if self.unspoken is not None:  # a group routed the call here; its agent died before speaking
            node, self.unspoken = self.unspoken, None
            if node == self.ctrl.node:
                await self.ctrl.apply(
                    [e for e in self.ctrl.engine.arrival(self.ctrl.state) if e.type != "set_node"]
                )
        feed = await self.read(self.cursor)
        if feed["run"] != self.run_id:  # the call continued as new: its log starts again at 0
            self.run_id, self.cursor = feed["run"], 0
            feed = await self.read(0)
        for env in feed["envelopes"]:
            await self.deliver(env)
        self.cursor = feed["next"]
        offered = bool(self.cancellable) and not primed
        self.running, self.cancellable = feed["running"], feed["cancellable"]
        self.interruptible = feed["interruptible"]
        if offered != bool(self.cancellable):
            await self.refresh_tools()
        self.unrouted = len(feed["unrouted"])
        for item in feed["unrouted"]:
            await self.route(item)
        if feed["unrouted"]:
            self.poke.set()  # read again at once: routing may have moved the call

    async def deliver(self, env: dict[str, Any]) -> None:
        port = self.ctrl.port
        note = getattr(port, "note", None)
        if note is not None:
            await note(describe(env))
        publish = getattr(port, "publish", None)
        if publish is not None:
            with contextlib.suppress(Exception):  # the room is a courtesy; the workflow has it all
                await publish(ROOM_TOPIC, json.dumps(env, default=str).encode())

    async def route(self, item: dict[str, Any]) -> None:
        ctrl = self.ctrl
        gid = item["group_id"]
        ctrl.outbox.kick()  # the update waits for every seq before it
        try:
            with ctrl.awaiting_answer() as moves:
                res: CallFunctionResult = await ctrl.call.handle.execute_update(
                    "route_jobs",
                    RouteRequest(group_id=gid, after_seq=ctrl.seq, epoch=ctrl.epoch),
                    result_type=CallFunctionResult,
                )
        except (WorkflowUpdateFailedError, RPCError) as exc:
            if ctrl.refused(exc):
                return
            log.warning("group %s not routed: %s", gid, type(exc).__name__)
            return
        if ctrl.dead:
            return
        if res.state is not None:  # with this agent's own events since on top (FlowController.rebased)
            ctrl.state = ctrl.rebased(res.state, res.applied_seq, moves)
        await ctrl.apply(EFFECTS_ADAPTER.validate_python(res.effects))
        if ctrl.state.waiting is not None:  # the route's gate waits for extracted values
            await ctrl.values.arrived()
        if res.decision == "stay" and gid not in self.cancelled_by_llm and ctrl.port is not None:
            ctrl.port.reply(GROUP_DONE.format(outcome=item.get("outcome")), True)

    async def refresh_tools(self) -> None:
        port, node = self.ctrl.port, self.ctrl.current_tools()
        update = getattr(port, "update_tools", None)
        if update is None or node is None:
            return
        await update(offer_cancel(self.ctrl, offer(self.ctrl, node)).tools)

    async def cancel(self, reason: str = "llm") -> ToolOutcome:
        """The LLM's ``cancel_jobs`` (or the caller barging in): the workflow cancels the
        groups and answers once they have ended."""
        ids = list(self.cancellable if reason == "llm" else self.interruptible)
        if reason == "llm":
            self.cancelled_by_llm.update(ids)
        self.ctrl.outbox.kick()  # turns waiting to ride along go first, as before any update
        try:
            out = await self.ctrl.call.handle.execute_update(
                "cancel_jobs",
                CancelRequest(group_ids=ids, reason=reason, epoch=self.ctrl.epoch),
                result_type=dict,
            )
        except (WorkflowUpdateFailedError, RPCError) as exc:
            self.ctrl.refused(exc)
            return ToolOutcome({"status": "error", "error": str(exc)[:200]}, True, True)
        self.poke.set()
        return ToolOutcome(out, run_llm=True)

    def on_barge_in(self) -> None:
        if self.interruptible and not self.ctrl.dead:
            task = asyncio.get_running_loop().create_task(self.cancel("interruption"))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    def started(self) -> None:
        """A group was just started by this agent's LLM: read at once."""
        self.poke.set()
