"""The agent's side of a durable call: the engine on the hot path, the workflow behind it.

A transition is applied here, by the same pure engine the workflow runs, the moment
the LLM calls it: the caller hears the new node at once, and the ``transition`` event
goes to the workflow through the outbox, never waited for. Node functions, whose
result the LLM needs, are ``call_function`` updates. Event ids are derived from the
turn and the step within it, so a new agent replaying a turn after a crash sends the
ids the workflow already has, and nothing is applied or run twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from logging import INFO
from typing import Any

from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError

from ringflow.agents.device_tools import DeviceTools, call_device_tool, falls_back, serves
from ringflow.agents.fifo_gate import FifoGate
from ringflow.agents.hooks import NO_HOOKS, AgentHooks
from ringflow.agents.hot_path import SessionPort, ToolOutcome, call_locally
from ringflow.agents.jobs import JobsFeed
from ringflow.agents.outbox import Outbox
from ringflow.agents.signals import DeferredTransition, function_event_id, step_event_id
from ringflow.agents.values import Values
from ringflow.callflow.draft import waits_for
from ringflow.callflow.effects import (
    Effect,
    EndCall,
    LLMTurn,
    Rejected,
    RunFunction,
    Say,
    SetNode,
)
from ringflow.callflow.end_reasons import EndReason
from ringflow.callflow.engine import Engine, Step
from ringflow.callflow.events import (
    DtmfEntered,
    Event,
    ExtractionResult,
    FunctionCalled,
    HangUp,
    IdleKind,
    MachineAnswered,
    MaxDuration,
    SupervisorAction,
    UserIdle,
    UserSpoke,
)
from ringflow.callflow.function_step import function_step, state_digest
from ringflow.callflow.jobs import CANCEL_TOOL
from ringflow.callflow.knowledge import RETRIEVAL_FUNCTION
from ringflow.callflow.reads import function_reads
from ringflow.callflow.safe_text import scrub, scrub_text
from ringflow.callflow.state import CallState
from ringflow.contract.events import CallEvent, HangupEvent, Heartbeat, Turn, TurnsEvent
from ringflow.contract.supervision import SupervisorStep, whisper_note
from ringflow.contract.updates import CallFunctionRequest, CallFunctionResult, Snapshot, ValuesAnswer
from ringflow.contract.wire import MAX_NAME_CHARS, MAX_TEXT_CHARS, oversized_args
from ringflow.workflows.client import CallHandle

__all__ = ["WRAP_UP", "AgentStopped", "FlowController", "SessionPort", "ToolOutcome", "call_locally"]
log = logging.getLogger(__name__)
WRAP_UP = "The call has reached its time limit: wrap up in one short sentence and say goodbye."
# What the LLM gets from a tool called on an agent that no longer serves the call: no reply.
STOPPED = ToolOutcome({"status": "error", "error": "this agent no longer serves the call"}, False, True)


class AgentStopped(Exception):
    """This agent no longer serves its call (the call ended without it, or a simulation
    killed it through its ``at_point`` hook, ``agents/hooks.py``): what it was asked to do
    next goes nowhere."""


def superseded(exc: BaseException) -> bool:
    """An update refused because a newer agent attached to the call (``workflows/epochs.py``)."""
    cause = getattr(exc, "cause", None)
    return getattr(cause, "type", None) == "AgentSuperseded"


class FlowController:
    # Slots: a controller has more attributes than CPython 3.11 keeps inline in an
    # instance (30), so without them every read on the hot path is a dict lookup.
    __slots__ = (
        "_state",
        "agent_id",
        "at_point",
        "awaited",
        "call",
        "cancellable",
        "clock",
        "dead",
        "derives",
        "device",
        "end_reason",
        "engine",
        "epoch",
        "fn_reads",
        "in_flight",
        "jobs",
        "lease_held",
        "on_refused",
        "on_stopped",
        "outbox",
        "paused_s",
        "plain",
        "port",
        "presses",
        "remote",
        "segment",
        "seq",
        "step_no",
        "tool_calls",
        "transferring",
        "turn_key",
        "values",
    )

    def __init__(
        self,
        call: CallHandle,
        snapshot: Snapshot,
        outbox: Outbox,
        agent_id: str,
        clock: Callable[[], float] = time.time,
        hooks: AgentHooks = NO_HOOKS,
    ) -> None:
        self.call = call
        self.engine = Engine(snapshot.definition)
        self.values = Values(self)  # extraction results, into this engine (agents/values.py)
        self._state: CallState = snapshot.state
        self.seq = snapshot.next_seq - 1
        # this agent's attach number, on everything it sends (None: a worker without epochs)
        self.epoch: int | None = snapshot.epoch or None
        # the worker answers a function call with its outcome alone when asked from its state
        self.derives = snapshot.derives
        # this agent's own events taken while answers are awaited, one list per answer (``took``)
        self.awaited: list[list[tuple[int, Event]]] = []
        # before acting on the room: does this agent still hold the call's lease? (agents/lease.py)
        self.lease_held: Callable[[], Awaitable[bool]] | None = None
        self.on_stopped: Callable[[str], None] | None = None  # the runner leaves the room
        self.outbox = outbox
        self.agent_id = agent_id
        self.clock = clock
        self.at_point = hooks.at_point  # a simulation's kill points (agents/hooks.py); None in production
        self.on_refused = hooks.on_refused
        self.port: SessionPort | None = None
        self.turn_key = uuid.uuid4().hex[:10]
        self.step_no = 0
        self.end_reason: EndReason | None = snapshot.state.end_reason if snapshot.ended else None
        self.dead = False
        self.transferring = False
        # (node, function) pairs whose entry presses keys on the line (send_dtmf: true)
        self.presses = frozenset(
            (node_id, fn_name)
            for node_id, cnode in self.engine.flow.nodes.items()
            for fn_name, fn in cnode.functions.items()
            if fn.kind == "send_dtmf"
        )
        # (node, function) pairs the engine answers alone with nothing else to do: the hot
        # path's one test (every other call goes through _other_tool)
        self.plain = frozenset(
            (node_id, fn_name)
            for node_id, cnode in self.engine.flow.nodes.items()
            for fn_name, fn in cnode.functions.items()
            if fn.kind not in ("handler", "http", "mcp", "transfer", "jobs", "send_dtmf", "knowledge")
        )
        # (node, function) pairs that run in the workflow (handler, HTTP, MCP, transfer and
        # knowledge search functions)
        self.remote = frozenset(
            (node_id, fn_name)
            for node_id, cnode in self.engine.flow.nodes.items()
            for fn_name, fn in cnode.functions.items()
            if fn.kind in ("handler", "http", "mcp", "transfer", "jobs", "knowledge")
        )
        self.cancellable = frozenset(
            (node_id, fn_name)
            for node_id, cnode in self.engine.flow.nodes.items()
            for fn_name, fn in cnode.functions.items()
            if fn.kind in ("handler", "http", "mcp") and fn.cancel_on_interruption
        )
        # what each function run in the workflow renders from the call's values (its request)
        self.fn_reads = {
            (node_id, fn_name): function_reads(fn.entry)
            for node_id, cnode in self.engine.flow.nodes.items()
            for fn_name, fn in cnode.functions.items()
            if fn.kind in ("http", "transfer")
        }
        self.in_flight: dict[str, bool] = {}  # cancellable calls running, by event id: cancel asked?
        self.device: DeviceTools | None = None  # the caller's device's tools (agents/device_tools.py)
        self.jobs: JobsFeed | None = None  # background job groups (agents/jobs.py)
        self.tool_calls = FifoGate()  # one function call at a time (on_tool_call)
        # supervisors (agents/supervised.py): the takeovers' total length so far (the time
        # limit moves later by it), and the turns of the takeover under way
        self.paused_s = 0.0
        self.segment: list[tuple[str, str]] = []

    # --- plumbing ---------------------------------------------------------------------
    @property
    def state(self) -> CallState:
        return self._state

    @state.setter
    def state(self, state: CallState) -> None:
        """Every state the agent takes (its engine's steps, the workflow's answers): an
        extraction it holds as running is collected from then on (``agents/values.py``)."""
        self._state = state
        if state.extracting:
            self.values.watch()

    def bind(self, port: SessionPort) -> None:
        self.port = port

    @property
    def ending(self) -> asyncio.Task[None] | None:
        """The port's hang-up task once the call's end started it; None before (or unbound)."""
        return self.port.ending if self.port is not None else None

    def stop(self, why: str) -> None:
        """This agent no longer serves the call (a newer agent attached, or its lease was
        taken): nothing more of it reaches the workflow or the room, and its runner leaves."""
        if self.dead:
            return
        log.warning(
            "agent %s stops serving call %s: %s",
            self.agent_id,
            self.call.call_id,
            why,
            extra={"event": "agent_superseded", "agent_id": self.agent_id},
        )
        self.dead = True
        if self.on_stopped is not None:
            self.on_stopped(why)

    def refused(self, exc: BaseException) -> bool:
        """An update's failure: True (and this agent stopped) when it says a newer agent
        has the call."""
        if superseded(exc):
            self.stop(str(getattr(getattr(exc, "cause", None), "message", exc)))
            return True
        return False

    async def current(self, what: str) -> bool:
        """Before acting on the room: False (and this agent stopped) once it lost its lease."""
        if self.dead:
            return False
        if self.lease_held is None or await self.lease_held():
            return True
        self.stop(f"its lease of the call was released or taken ({what})")
        return False

    async def may_close_room(self) -> bool:
        """Before hanging the caller up (closing the room): an agent replaced since would
        hang up its successor's caller. With a lease, the lease says; without one, the
        workflow's current epoch (one query, once a call). The workflow away: go on."""
        if self.lease_held is not None or self.epoch is None:
            return await self.current("hanging up")
        try:
            now = await self.call.agent_epoch()
        except Exception as exc:
            log.warning(
                "call %s: the agent epoch could not be checked (%s)", self.call.call_id, type(exc).__name__
            )
            return not self.dead
        if now != self.epoch:
            self.stop(f"the call's agent is epoch {now} now, not {self.epoch}")
        return not self.dead

    def point(self, name: str) -> None:
        """A place where a stopped agent goes no further (and where a simulation may kill
        it): nothing more of a stopped controller reaches the workflow."""
        if self.dead:
            raise AgentStopped(name)
        if self.at_point is not None:
            self.at_point(self, name)

    def begin_turn(self, key: str | None = None) -> None:
        """Start a user turn; ids of its events are ``<key>:<step>:<kind>``."""
        self.turn_key = key or uuid.uuid4().hex[:10]
        self.step_no = 0

    def event_id(self, kind: str) -> str:
        self.step_no += 1
        return step_event_id(self.turn_key, self.step_no, kind)

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def sequenced(self, event: Event) -> int:
        """The next seq, for the event this agent just applied to its engine and now sends
        (``took``: kept for an answer awaited meanwhile)."""
        seq = self.next_seq()
        self.took(seq, event)
        return seq

    def took(self, seq: int, event: Event) -> None:
        """An event of this agent's own, applied to its engine and sent as ``seq``, kept
        while an update's answer is awaited (``awaiting_answer``): that answer's state is the
        workflow's before it applied this, and the workflow applies it on top, so this agent does too
        (``rebased``) instead of losing it (an extraction's result, the caller's turn)."""
        for moves in self.awaited:
            moves.append((seq, event))

    @contextlib.contextmanager
    def awaiting_answer(self) -> Iterator[list[tuple[int, Event]]]:
        """While an update's answer is awaited: the events this agent takes meanwhile, for
        ``rebased`` (answers awaited at once, a function and a job group's route, each get all)."""
        moves: list[tuple[int, Event]] = []
        self.awaited.append(moves)
        try:
            yield moves
        finally:
            self.awaited.remove(moves)

    def rebased(self, state: CallState, applied_seq: int | None, moves: list[tuple[int, Event]]) -> CallState:
        """An answer's ``state`` with this agent's own events after ``applied_seq`` (the last
        one it holds) applied on top, in order, as the workflow will apply them."""
        if applied_seq is None:  # a worker that does not say: its state as it is
            return state
        for seq, event in moves:
            if seq > applied_seq:
                state = self.engine.apply(state, event).state
        return state

    @property
    def ended(self) -> bool:
        return self.state.ended

    @property
    def node(self) -> str | None:
        return self.state.node

    def current_tools(self) -> SetNode | None:
        return self.engine.snapshot(self.state)

    # --- the hot path -----------------------------------------------------------------
    async def on_tool_call(self, name: str, args: dict[str, Any]) -> ToolOutcome:
        """One function call of the LLM, after the ones before it have finished.

        livekit-agents runs the calls of one reply concurrently, but each is a step of the
        engine from the state the one before left: a call refused on the old node, then a
        handler whose result moves the call, must be answered in that order on both sides.
        Run concurrently, both updates were in flight at once and their answers could come
        back in either order (they did on a loaded machine); the refusal's answer, carrying
        the state from before the move, then replaced the moved one, and the agent stayed on
        the old node while the workflow went on. The lock is FIFO and taken before the
        first await, so calls run in the LLM's order and their event ids stay stable."""
        gate = self.tool_calls
        if gate.held or gate.waiting:  # ``gate.enter_now()``'s test, written out (agents/fifo_gate.py)
            await gate.enter()
        else:
            gate.held = True
        # This runs while the caller waits for the next node, so durability costs it as
        # little as it can: one coroutine (the call's body is here, not in a helper it
        # awaits), one set lookup tells a plain local function (a transition or a capture)
        # from everything else, the event's id and model are built later by the outbox
        # sender, the put never awaits, and the kill points call nothing unless a
        # simulation hooked them (agents/hooks.py).
        try:
            if self.dead:
                raise AgentStopped("tool_call")
            if self.at_point is not None:
                self.at_point(self, "tool_call")
            if self.lease_held is not None and not await self.current("tool call"):
                return STOPPED  # (no lease to check: ``current`` would only repeat ``dead``)
            if args:  # a NUL or lone surrogate in the LLM's arguments: replaced as the workflow would
                args = scrub(args)
            self.step_no += 1
            state = self._state
            node = state.node
            presses = False
            if (node, name) not in self.plain:
                answered = await self._other_tool(node, name, args)
                if answered is not None:
                    return answered
                presses = (node, name) in self.presses
                state = self._state
            if args and (problem := oversized_args(name, args)) is not None:  # its signal would be refused
                return ToolOutcome({"status": "error", "error": problem}, True, True)
            if state.pending:
                await self.settle()  # a `function:` action's writes may decide this transition (a gate)
                state = self._state
            now = self.clock()
            step, out, runs = call_locally(self.engine, state, name, args, now)
            if out.error:  # refused: counted in the state, and reported so the workflow counts it too
                if len(name) > MAX_NAME_CHARS:  # no signal can carry it: neither side counts it
                    return out
                self._state = step.state
                self.seq = seq = self.seq + 1
                self.outbox.put(
                    DeferredTransition(
                        (self.turn_key, self.step_no, seq, node or "", name, args, now, self.epoch)
                    )  # type: ignore[arg-type]
                )
                return out
            if presses and (send := getattr(self.port, "send_dtmf", None)) is not None:
                await send(str(args.get("digits", "")))
            self._state = state = step.state  # the ``state`` setter's body, a call less
            if state.extracting:
                self.values.watch()
            if self.dead:  # killed while it settled or pressed keys
                raise AgentStopped("after_local_transition")
            if self.at_point is not None:
                self.at_point(self, "after_local_transition")  # applied here, its signal not yet queued
            self.seq = seq = self.seq + 1
            self.outbox.put(
                DeferredTransition(
                    (self.turn_key, self.step_no, seq, node or "", name, args, now, self.epoch)
                )  # type: ignore[arg-type]
            )
            if log.isEnabledFor(INFO):  # its record's fields are not built for nothing
                log.info(
                    "transition %s -> %s by %s",
                    node,
                    state.node,
                    name,
                    extra={"event": "transition", "from_node": node, "function": name},
                )
            await self.apply(step.effects)  # the transition's speech, or the whole new node
            if self._state.waiting is not None:  # its wait speech is said: the values resume it
                await self.values.arrived()
            if runs:
                await self.follow_actions()
            return out
        finally:
            if gate.waiting:
                gate.leave()  # hand it to the next call
            else:
                gate.held = False  # ``leave``'s free path, written out

    async def _other_tool(self, node: str | None, name: str, args: dict[str, Any]) -> ToolOutcome | None:
        """A call that is not a plain local function: ``cancel_jobs``, the device's tool, a
        function the workflow runs (handler, HTTP, MCP, transfer, jobs). None: the engine
        answers it (a ``send_dtmf`` entry, or a name it refuses)."""
        if name == CANCEL_TOOL and self.jobs is not None:
            return await self.jobs.cancel()
        if self.device is not None and serves(self, node, name):
            return await call_device_tool(self, name, args)
        if (node, name) not in self.remote:
            return None
        eid = function_event_id(self.turn_key, self.step_no, name)
        reads = self.fn_reads.get((node, name))  # type: ignore[arg-type]
        if reads and waits_for(self.engine.flow, self.state.extracting, reads):
            await self.values.known(reads)  # its request reads values still being extracted
        kind = self.engine.flow.nodes[node].functions[name].kind  # type: ignore[index]
        if kind != "transfer":
            out = await self.remote_function(eid, name, args)
            if kind == "jobs" and self.jobs is not None:
                self.jobs.started()
            if self.device is not None and falls_back(self, node, name, out):  # its MCP server is down
                return await call_device_tool(self, name, args)
            return out
        self.transferring = True  # the caller leaving the room now is the transfer working
        try:
            return await self.remote_function(eid, name, args)
        finally:
            self.transferring = False

    async def remote_function(self, eid: str, name: str, args: dict[str, Any]) -> ToolOutcome:
        before = self.state
        req = CallFunctionRequest(
            event_id=eid,
            node=before.node or "",
            name=name,
            args=args,
            at=self.clock(),
            after_seq=self.seq,
            epoch=self.epoch,
            state_digest=state_digest(before) if self.derives else None,
        )
        self.outbox.kick()  # the update waits for every seq before it: no lingering turns
        self.point("during_function")
        cancellable = (req.node, name) in self.cancellable
        if cancellable:
            self.in_flight[eid] = False
        try:
            with self.awaiting_answer() as moves:
                res = await self.ask_function(req)
                if isinstance(res, CallFunctionResult) and res.outcome is not None:
                    step = self.derived_step(before, req, res)
                    if step is not None:
                        res = res.model_copy(update={"state": step.state, "effects": step.effects})
                    else:  # the engines disagree: the whole answer (kept by the workflow)
                        res = await self.ask_function(req.model_copy(update={"state_digest": None}))
        finally:
            cancelled = self.in_flight.pop(eid, False) if cancellable else False
        if isinstance(res, ToolOutcome):
            return res
        self.point("after_function")
        if cancelled and res.error:  # the caller talked over it: their new turn is what to answer
            if res.state is not None:
                self.state = self.rebased(res.state, res.applied_seq, moves)
            return ToolOutcome(res.result, run_llm=False, error=True)
        if res.state is not None:
            self.state = self.rebased(res.state, res.applied_seq, moves)
        effects = res.effects
        await self.apply(effects)
        if self.state.waiting is not None:
            await self.values.arrived()
        if any(type(e) is RunFunction and e.action for e in effects):
            await self.follow_actions()
        return ToolOutcome(res.result, run_llm=res.run_llm, error=res.error)

    async def ask_function(self, req: CallFunctionRequest) -> CallFunctionResult | ToolOutcome:
        """The workflow's answer, or what the LLM is told when there is none."""
        try:
            return await self.call.call_function(req)
        except (WorkflowUpdateFailedError, RPCError) as exc:
            if self.refused(exc):
                return STOPPED
            cause = getattr(exc, "cause", None) or exc
            return ToolOutcome(
                {"status": "error", "error": str(getattr(cause, "message", cause))},
                run_llm=True,
                error=True,
            )

    def derived_step(
        self, before: CallState, req: CallFunctionRequest, res: CallFunctionResult
    ) -> Step | None:
        """The step the workflow's ``outcome`` makes from ``before``, taken by this agent's
        engine (``callflow/function_step.py``): the workflow sent the outcome alone because its
        state was ``before`` (the request's digest) and this step is the one it took, so the
        step is its whole answer's effects and state. None when the step does not end where
        the workflow's did (an engine of another release)."""
        assert res.outcome is not None
        called = FunctionCalled(name=req.name, args=req.args, node=req.node, at=req.at)
        step = function_step(self.engine, before, called, res.outcome)
        if step is None or state_digest(step.state) != res.digest:
            log.warning(
                "the function's step differs from the workflow's; asking for its whole answer",
                extra={"event": "function_step_differs", "function": req.name},
            )
            return None
        return step

    def retrieves(self) -> bool:
        """Whether the node the call is on answers each caller turn from the knowledge base
        (``knowledge:`` on the node)."""
        node = self.state.node
        cnode = self.engine.flow.nodes.get(node) if node is not None else None
        return (
            cnode is not None
            and RETRIEVAL_FUNCTION in cnode.hidden
            and not self.state.ended
            and not self.state.takeover
        )

    async def retrieve(self, query: str) -> dict[str, Any] | None:
        """The node's automatic retrieval for the caller's turn, before the LLM answers it: the
        hidden ``knowledge_retrieval`` function, run by the workflow as the LLM's knowledge
        entry is (a ``call_function`` update; the ``kb_search`` local activity; a ``tool``
        turn in the transcript). Its event id is the turn's next step, so an agent that
        replays the turn after a kill gets the workflow's first answer, not a second search.
        None when the workflow could not answer: the LLM answers without passages."""
        gate = self.tool_calls
        if gate.held or gate.waiting:  # ``gate.enter_now()``'s test, written out (agents/fifo_gate.py)
            await gate.enter()
        else:
            gate.held = True
        try:
            if self.dead:
                raise AgentStopped("retrieval")
            self.step_no += 1
            req = CallFunctionRequest(
                event_id=function_event_id(self.turn_key, self.step_no, RETRIEVAL_FUNCTION),
                node=self.state.node or "",
                name=RETRIEVAL_FUNCTION,
                args={"query": scrub_text(query.strip())[:500] or "?"},
                at=self.clock(),
                after_seq=self.seq,
                epoch=self.epoch,
            )
            self.outbox.kick()  # the update waits for the caller's turn, still in the outbox
            try:
                with self.awaiting_answer() as moves:
                    res = await self.call.call_function(req)
            except (WorkflowUpdateFailedError, RPCError) as exc:
                if not self.refused(exc):
                    log.warning("call %s: the knowledge retrieval failed: %s", self.call.call_id, exc)
                return None
            # the search ran and is in the transcript; its passages are not yet the LLM's
            self.point("during_search")
            if res.state is not None:
                self.state = self.rebased(res.state, res.applied_seq, moves)
            return res.result if isinstance(res.result, dict) and not res.error else None
        finally:
            gate.leave()

    async def settle(self) -> bool:
        """Wait for the workflow to run what the engine ordered (an action node's function,
        ``function:`` actions) and route on it, then continue from its state. False when the
        workflow could not be reached: the agent stays where its own engine put it.

        A controller killed while the flush waited (its outbox abandoned with the transition
        still in it) asks nothing more: the workflow would wait for a seq that never comes
        (holding the call past its agent timeout) and take this dead agent for the call's."""
        try:
            await self.outbox.flush(timeout=30)
            if self.dead:
                return False
            state = await self.call.settle(self.agent_id, after_seq=self.seq, epoch=self.epoch)
        except (WorkflowUpdateFailedError, RPCError) as exc:
            if self.refused(exc):
                return False
            log.warning("call %s: could not settle with the workflow: %s", self.call.call_id, exc)
            return False
        self.state = state
        return True

    async def follow_actions(self) -> None:
        """An action node was entered: its function runs in the workflow, which routes the
        call on the result (possibly through more actions and gates). Once it has, the agent
        arrives where the call went as if it had taken the step itself: the node's prompt and
        tools, its pre-action speech, greeting or first turn, and an end node's last turn."""
        if await self.settle():
            if self.state.waiting is not None and self.port is not None:
                # the workflow's gate waits for values: the caller hears the wait speech, and
                # the values' result shows the node (agents/values.py)
                self.port.say(self.engine.definition.flow.settings.wait_speech, False)
                await self.values.arrived()
                return
            await self.apply(self.engine.arrival(self.state))

    async def apply_extraction(self, answer: ValuesAnswer) -> None:
        """An extraction's result: applied to this engine and reported at this point of the
        agent's events (an ``extracted`` event), so the workflow applies it at the same step;
        an entry that waited for it goes on here (its node shown, its gate routed)."""
        if self.dead or self.state.ended or answer.id not in self.state.extracting:
            return
        self.point("extracted")
        now = self.clock()
        result = ExtractionResult(
            node=answer.node, id=answer.id, values=answer.values, error=answer.error, at=now
        )
        step = self.engine.apply(self.state, result)
        self.state = step.state
        seq = self.sequenced(result)
        self.outbox.put(
            CallEvent(
                # not a step of the turn: a result arriving at another moment in a replayed
                # turn must not shift the ids of the turn's own steps (its function calls)
                event_id=f"extracted:{answer.id}",
                seq=seq,
                kind="extracted",
                data={"id": answer.id, "values": answer.values, "error": answer.error},
                at=now,
            )
        )
        await self.apply(step.effects)  # what waited is shown before the hot path goes on
        if any(type(e) is RunFunction and e.action for e in step.effects):
            await self.follow_actions()

    def start_effects(self) -> list[Effect]:
        """A fresh call: what entering the node it is on says and shows, greeting and
        pre-actions included (after a start on an action node, where that routed it)."""
        return self.engine.opening(self.state)

    async def apply(self, effects: list[Effect]) -> None:
        port = self.port
        assert port is not None, "bind a session port first"
        if effects and not await self.current("acting on the room"):
            return
        allow = True
        for eff in effects:
            if isinstance(eff, SetNode):
                allow = eff.allow_interrupt
                await port.set_node(eff)
            elif isinstance(eff, Say):
                port.say(eff.text, eff.allow_interrupt)
            elif isinstance(eff, LLMTurn):
                port.reply(eff.instructions, allow)
            elif isinstance(eff, EndCall):
                self.end_reason = eff.reason
                await port.end_call(eff.reason)

    # --- what the caller does ---------------------------------------------------------
    def on_turn(
        self,
        role: str,
        text: str,
        *,
        interrupted: bool = False,
        started_at: float | None = None,
        ended_at: float | None = None,
    ) -> None:
        """A final utterance (user), a finished reply (assistant), or the summary a node's
        context was reset to (system) goes to the transcript."""
        if not text or self.dead:
            return
        try:
            self.point(f"turn:{role}")
        except AgentStopped:
            return
        now = self.clock()
        text = scrub_text(text)  # a NUL or a lone surrogate (STT, LLM) would stop its signal
        # A turn longer than the workflow takes in one piece goes as consecutive turns of the
        # same role, rather than being refused there and lost from the transcript.
        for start in range(0, len(text), MAX_TEXT_CHARS):
            turn = Turn(
                role=role,
                text=text[start : start + MAX_TEXT_CHARS],
                node=self.state.node,
                interrupted=interrupted,
                started_at=started_at or now,
                ended_at=ended_at or now,
            )
            self.outbox.put(
                TurnsEvent(
                    event_id=self.event_id(role), seq=self.next_seq(), items=[turn], at=now, epoch=self.epoch
                )
            )
        if role == "user":
            spoke = UserSpoke(at=now)
            self.state = self.engine.apply(self.state, spoke).state
            self.took(self.seq, spoke)  # the workflow applies it with each of the turn's parts
        if self.state.takeover and role in ("user", "supervisor"):
            self.segment.append((role, text))  # what a hand-back to a node that resets its context keeps

    async def on_dtmf(self, digits: str) -> None:
        """Keys the caller pressed (collected by ``agents/dtmf.py``): applied here at once by
        the engine (a node with ``dtmf`` routes on them), sent to the workflow in order, and
        shown to the LLM when they move nothing."""
        if self.state.ended or self.dead or not digits:
            return
        self.point("dtmf")
        if not await self.current("keys"):
            return
        now = self.clock()
        node = self.state.node
        step = self.engine.apply(self.state, DtmfEntered(digits=digits, node=node, at=now))
        if any(type(e) is Rejected for e in step.effects):
            log.warning("keys on node %s not applied: %s", node, step.effects[0])
            return
        self.state = step.state
        seq = self.sequenced(DtmfEntered(digits=digits, node=node, at=now))
        self.outbox.put(
            CallEvent(
                event_id=self.event_id("dtmf"),
                seq=seq,
                kind="dtmf",
                data={"digits": digits, "node": node},
                at=now,
                epoch=self.epoch,
            )
        )
        if (heard := getattr(self.port, "heard_keys", None)) is not None:
            await heard(digits)
        if any(type(e) is SetNode for e in step.effects):
            await self.apply(step.effects)
        elif self.port is not None:
            self.port.reply(None, True)

    def on_barge_in(self) -> None:
        """The caller started talking: the functions running for the LLM that are marked
        ``cancel_on_interruption`` are cancelled. The workflow cancels their activity and
        answers their update with the cancellation, which the LLM is told without replying
        to it (the caller's new turn is what it answers)."""
        if self.jobs is not None:
            self.jobs.on_barge_in()  # groups marked cancel_on_interruption
        if self.dead or not self.in_flight:
            return
        now = self.clock()
        for eid, asked in list(self.in_flight.items()):
            if not asked:
                self.in_flight[eid] = True
                self.outbox.put(
                    CallEvent(
                        event_id=f"{eid}:cancel",
                        kind="interruption",
                        data={"cancel": eid},
                        at=now,
                        epoch=self.epoch,
                    )
                )

    async def on_machine(self, category: str) -> None:
        """Answering-machine detection said a machine picked up: the flow's voicemail node
        (its message is said, then the call ends) or, without one, hang up ``voicemail``."""
        if self.state.ended or self.dead:
            return
        self.point("machine")
        if not await self.current("machine answered"):
            return
        now = self.clock()
        machine = MachineAnswered(category=category[:40], at=now)
        step = self.engine.apply(self.state, machine)
        if any(type(e) is Rejected for e in step.effects):
            return
        self.state = step.state
        seq = self.sequenced(machine)
        self.outbox.put(
            CallEvent(
                event_id=self.event_id("machine"),
                seq=seq,
                kind="answering_machine",
                data={"category": category[:40]},
                at=now,
                epoch=self.epoch,
            )
        )
        await self.apply(step.effects)

    async def on_idle(self, kind: IdleKind = "silence") -> None:
        """An empty input: the caller said nothing for ``idle.timeout_s`` (silence), spoke
        but no words were transcribed (empty_transcript), or ended a push-to-talk turn with
        nothing said (empty_turn). The engine re-prompts, gives up, or (``on_give_up:
        wait``) stays quiet. The kind goes to the workflow only when it is not a silence, so
        the events of a silence are what they always were."""
        if self.state.ended or self.state.takeover:  # the idle rule pauses during a takeover
            return
        self.point("idle")
        if not await self.current("idle"):
            return
        now = self.clock()
        idle = UserIdle(at=now, kind=kind)
        step = self.engine.apply(self.state, idle)
        self.state = step.state
        if not self.state.ended:
            seq = self.sequenced(idle)
            self.outbox.put(
                CallEvent(
                    event_id=self.event_id("idle"),
                    seq=seq,
                    kind="user_idle",
                    data={} if kind == "silence" else {"kind": kind},
                    at=now,
                    epoch=self.epoch,
                )
            )
        # Giving up: the goodbye is said first and ``finish`` then sends the hangup (reason
        # user_idle), as for max_duration. Sending the idle event now would end the workflow
        # before the goodbye's turn reached it, and the record would lack the goodbye.
        await self.apply(step.effects)

    # --- supervisors (agents/supervised.py, workflows/supervision.py) ------------------
    async def on_supervisor(self, step: SupervisorStep) -> None:
        """A supervisor's action the workflow took (``step.id``, in order): applied to this
        engine and reported at this point of the agent's events (a ``supervisor`` event), so
        the workflow's engine applies it at the same step. A whisper goes into the LLM's
        context for its next turn; a takeover pauses the bot; a hand-back resumes it on the
        node the engine says, with the supervisor's segment in its context."""
        if self.dead or self.state.ended or step.id <= self.state.supervisor_seen:
            return
        self.point("supervisor")
        if not await self.current("supervisor"):
            return
        now = self.clock()
        action = SupervisorAction(id=step.id, action=step.action, node=step.node, at=now)
        done = self.engine.apply(self.state, action)
        if any(type(e) is Rejected for e in done.effects):
            log.warning("supervisor %s %s not applied: %s", step.action, step.id, done.effects[0])
            return
        self.state = done.state
        seq = self.sequenced(action)
        self.outbox.put(
            CallEvent(
                event_id=f"supervisor:{step.id}",  # one per action: a successor repeats the id
                seq=seq,
                kind="supervisor",
                data={"id": step.id, "action": step.action, "node": step.node},
                at=now,
                epoch=self.epoch,
            )
        )
        port = self.port
        if step.action == "whisper" and step.text:
            note = whisper_note(step.text)
            if (write := getattr(port, "note", None)) is not None:
                await write(note)
            self.on_turn("system", note)  # a successor's context has it too (runner.chat_context)
        elif step.action == "takeover":
            self.segment = []
            if (pause := getattr(port, "pause", None)) is not None:
                await pause()
        elif step.action == "handback":
            if (resume := getattr(port, "resume", None)) is not None:
                await resume()
            await self.apply(done.effects)
            reset = any(type(e) is SetNode and e.context != "append" for e in done.effects)
            heard = getattr(port, "heard", None)
            if reset and heard is not None:  # a node that starts its context afresh still hears it
                for role, text in self.segment:
                    await heard(role, text)
            self.segment = []
            if self.state.waiting is not None:
                await self.values.arrived()

    async def on_segment_turn(self, role: str, text: str) -> None:
        """A turn while a supervisor has the call (the supervisor's, or the caller's to
        them): kept in the transcript and in the bot's context, never answered."""
        if not self.state.takeover or not text:
            log.warning("a %s turn outside a takeover is not part of one: ignored", role)
            return
        self.on_turn(role, text)
        if (heard := getattr(self.port, "heard", None)) is not None:
            await heard(role, text)

    async def on_max_duration(self) -> None:
        """Our own timer, ahead of the workflow's backstop: a short wrap-up, then hang up."""
        if self.state.ended or self.port is None:
            return
        self.port.reply(WRAP_UP, False)
        step = self.engine.apply(self.state, MaxDuration(at=self.clock()))
        self.state = step.state
        await self.apply(step.effects)

    async def on_caller_hangup(self) -> None:
        if self.state.ended or self.transferring:
            return
        self.state = self.engine.apply(self.state, HangUp(reason="user_hangup", at=self.clock())).state
        self.end_reason = "user_hangup"
        await self.finish("user_hangup")

    async def finish(self, reason: EndReason, flush_timeout: float = 10.0) -> None:
        """Tell the workflow the call is over (after the last turn was spoken) and flush."""
        if self.dead:
            return
        self.outbox.put(
            HangupEvent(event_id=self.event_id("hangup"), reason=reason, at=self.clock(), epoch=self.epoch)
        )
        await self.outbox.close(flush_timeout)

    def heartbeat(self) -> None:
        if self.dead:
            return
        self.outbox.put(Heartbeat(agent_id=self.agent_id, at=self.clock(), epoch=self.epoch))
