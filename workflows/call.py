"""CallWorkflow: the durable owner of one call.

It runs the same pure engine as the agent, on the events the agent reports, and
applies the durable effects (functions, extraction, persistence). The agent never
waits for it on a transition: transitions arrive as signals, applied in order and
once each; only node functions, whose result the LLM needs, are updates.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from callflow.effects import Effect, Extract, Rejected, RunFunction
    from callflow.engine import Engine
    from callflow.errors import safe_reason
    from callflow.events import (
        CallStarted,
        FunctionCalled,
        MaxDuration,
    )
    from callflow.inputs import undeclared_variables
    from callflow.state import CallState
    from workflows import carry as budget
    from workflows.agent_presence import agent_lost, final_turn
    from workflows.call_carry import CallCarry
    from workflows.call_core import internal_error
    from workflows.call_parts import CallProgress, FunctionCalls, Liveness, Transcript
    from workflows.contract import (
        AttachRequest,
        CallFunctionRequest,
        CallFunctionResult,
        CallInput,
        CallRecord,
        CallView,
        Carry,
        Snapshot,
        Turn,
        call_input_problems,
        oversized_args,
    )
    from workflows.device_record import DeviceRecordMixin
    from workflows.dialing import DIAL_PATCH, place_call
    from workflows.inbox import Inbox
    from workflows.intake import Refusal, intake, intake_one, read_request
    from workflows.jobs import JobsMixin
    from workflows.mcp_pin import PIN_PATCH, needs_pin, pin_tools
    from workflows.record import call_view
    from workflows.room_events import RoomEvent, on_room_event
    from workflows.visibility import Visibility

REFUSE_UNDECLARED_PATCH = "refuse-undeclared-variables"
REARM_PATCH = "liveness-rearm-v1"  # the liveness timer moved later from a signal's task
BOUNDED_INPUT_PATCH = "bounded-call-input-text"
LATE_TIMER_S = 5.0
MALFORMED_UPDATE_PATCH = "malformed-update-recorded-v1"
NO_PAYLOAD = RawValue(Payload())  # an update sent with no payload (the handlers' default)
M = TypeVar("M", bound=BaseModel)


@workflow.defn(name="CallWorkflow")
class CallWorkflow(JobsMixin, DeviceRecordMixin, CallCarry):
    # The input arrives raw, like signals: a start payload that does not decode into a
    # CallInput (a hand-made ``temporal workflow start``) fails the workflow at once with what
    # was wrong, instead of failing its first workflow task again and again.
    @workflow.init
    def __init__(self, inp: RawValue) -> None:
        self.bad_input: str | None = None
        try:
            self.setup(
                inp
                if isinstance(inp, CallInput)
                else workflow.payload_converter().from_payload(inp.payload, CallInput)
            )
        except Exception as exc:
            if internal_error(exc):
                raise
            self.bad_input = safe_reason(exc)

    def setup(self, inp: CallInput) -> None:
        self.inp = inp
        self.engine = Engine(inp.definition)
        self.vis = Visibility(inp)
        self.tasks: set[asyncio.Task[Any]] = set()
        self.room_events_seen: list[str] = []  # LiveKit webhooks applied (workflows/room_events.py)
        self.wake = False
        self.start_error: str | None = None
        now = workflow.now().timestamp()
        # One way in: a new call starts from the carry of a run zero (``first_run``).
        c = inp.carry if inp.carry is not None else self.first_run(inp, now)
        self.call = CallProgress.carried(c, now)
        self.inbox = Inbox(c.next_seq, c.seen_ids, c.held, c.held_since)
        self.functions = FunctionCalls.carried(c)
        self.transcript = Transcript.carried(c)
        if inp.carry is not None:  # extractions the last run left running start again
            self.startup: list[Effect] = [
                Extract(node=n, fields=list(self.engine.flow.nodes[n].node.extract))
                for n in c.pending_extractions
            ]
        self.tools_ready = not needs_pin(inp)  # MCP tools are pinned first (workflows/mcp_pin.py)
        self.pending_extractions: list[str] = []
        self.final_extracts: list[Extract] = []
        self.liveness = Liveness(inp.agent_timeout_s, now)

    def first_run(self, inp: CallInput, now: float) -> Carry:
        """A new call: the engine starts it, and what it orders first runs once the call does."""
        step = self.engine.start(
            CallStarted(
                call_id=inp.call_id,
                variables=inp.variables,
                caller_number=inp.caller_number,
                called_number=inp.called_number,
                at=now,
            )
        )
        rejected = [e for e in step.effects if isinstance(e, Rejected)]
        self.start_error = rejected[0].reason if rejected else None
        self.startup = step.effects
        return Carry(state=step.state, status="dialing", next_seq=1, runs=0, started_at=now)

    # --- run --------------------------------------------------------------------------
    @workflow.run
    async def run(self, raw: RawValue) -> CallRecord:
        if self.bad_input is not None:
            raise ApplicationError(
                f"CallWorkflow cannot start: its input is not a CallInput: {self.bad_input}",
                type="InvalidCallInput",
                non_retryable=True,
            )
        inp = self.inp
        if self.start_error is not None:
            raise ApplicationError(
                f"call {inp.call_id} cannot start: {self.start_error}",
                type="InvalidCallInput",
                non_retryable=True,
            )
        undeclared = undeclared_variables(inp.definition.flow, inp.variables) if inp.carry is None else []
        if undeclared and workflow.patched(REFUSE_UNDECLARED_PATCH):  # a client that skipped the check
            raise ApplicationError(
                f"call {inp.call_id} cannot start: " + "; ".join(str(i) for i in undeclared[:10]),
                type="InvalidCallInput",
                non_retryable=True,
            )
        too_long = call_input_problems(inp) if inp.carry is None else []
        if too_long and workflow.patched(BOUNDED_INPUT_PATCH):
            raise ApplicationError(
                f"call {inp.call_id} cannot start: " + "; ".join(too_long),
                type="InvalidCallInput",
                non_retryable=True,
            )
        if not self.tools_ready and workflow.patched(PIN_PATCH):
            await pin_tools(self)
        self.tools_ready = True
        try:
            await self.converse(inp)
        except Exception as exc:
            if internal_error(exc):
                raise
            # A bug or an input nothing anticipated: the call ends with an error, and its record
            # and webhook still go out, rather than a workflow task that fails forever.
            self.fail_call(f"the call could not go on: {safe_reason(exc)}")
        return await self.finish()

    async def converse(self, inp: CallInput) -> None:
        self.apply_effects(self.startup)
        if inp.dial is not None and inp.carry is None and workflow.patched(DIAL_PATCH):
            self.spawn(place_call(self))
        self.vis.sync(self.call.flow_state, self.call.status)
        settings = inp.definition.flow.settings
        deadline = self.call.started_at + settings.max_duration_s
        # One timer at a time, re-armed only once it has fired or when something must happen
        # sooner than it would fire. A timeout on each wait would cancel and restart a timer on
        # every wake-up: two history events per signal. The agent timeout moves later with each
        # event, so the timer may fire early; the checks below then find nothing due and re-arm.
        timer: asyncio.Task[None] | None = None
        timer_at = 0.0
        rearm = workflow.patched(REARM_PATCH)
        while not self.call.flow_state.ended:
            now = workflow.now().timestamp()
            due = deadline
            if self.call.status == "live":
                due = min(due, self.liveness.due)
            if self.inbox.held_since is not None and workflow.patched("gap-timer-v1"):
                due = min(due, self.inbox.held_since + inp.gap_wait_s)  # see Inbox.skip_gap
            if rearm and timer is not None and not timer.done() and self.rearm_due(timer_at, deadline):
                timer.cancel()
                timer = None
            if timer is None or timer.done() or due < timer_at:
                if timer is not None:
                    timer.cancel()
                timer_at = due
                timer = asyncio.get_event_loop().create_task(workflow.sleep(max(0.001, due - now)))

            def woken(t: asyncio.Task[None] = timer, at: float = timer_at) -> bool:  # bound now
                return (
                    self.wake
                    or self.call.flow_state.ended
                    or t.done()
                    or (rearm and self.rearm_due(at, deadline))
                )

            await workflow.wait_condition(woken)
            self.wake = False
            self.vis.sync(self.call.flow_state, self.call.status)
            if self.call.flow_state.ended:
                break
            now = workflow.now().timestamp()
            self.apply_ready(*self.inbox.skip_gap(now, inp.gap_wait_s))
            # A timer firing long after it was due means Temporal (or every worker) was down,
            # not just the agent: its events could not arrive either, so it gets a fresh timeout.
            fired_late = timer is not None and timer.done() and now - timer_at > LATE_TIMER_S
            if now >= deadline:
                self.step(MaxDuration(at=now))
            elif self.call.status == "live" and self.liveness.overdue(now):
                if fired_late:
                    self.liveness.seen(now)
                else:
                    await agent_lost(self)
            elif self.should_continue_as_new():
                await self.continue_as_new()
        await final_turn(self)
        for eff in self.final_extracts:
            self.pending_extractions.append(eff.node)
            self.spawn(self.extract(eff))

    # --- messages from the agent ------------------------------------------------------
    # One dynamic handler takes every signal (``events``, ``transition``, ``turns``, ``event``,
    # ``hangup``, ``heartbeat``; see ``workflows/intake.py``) as raw payloads: the SDK's own
    # decoding would fail the workflow task on a missing or non-JSON payload, or drop it
    # unrecorded. Here every payload is read, checked and applied or recorded as rejected.
    @workflow.signal(dynamic=True)
    def on_signal(self, name: str, payloads: Sequence[RawValue]) -> None:
        if self.bad_input is not None:
            return  # the run fails at once (see __init__)
        converter = workflow.payload_converter()

        def decode(raw: RawValue) -> Any:
            return converter.from_payload(raw.payload)

        try:
            if name == "room_event":
                ev = intake_one(name, payloads, decode, RoomEvent)
                if isinstance(ev, RoomEvent):
                    on_room_event(self, ev, self.room_events_seen)
                else:
                    self.take(ev)  # type: ignore[arg-type]
                return
            for item in intake(name, payloads, decode):
                self.take(item)
        except Exception as exc:
            if internal_error(exc):
                raise
            self.record_rejected(None, f"signal '{name[:64]}' could not be applied: {type(exc).__name__}")

    # --- updates ----------------------------------------------------------------------
    # Updates take their payload raw, like signals: a malformed one is accepted by the
    # validator and refused by the handler (``request``), so it is recorded in
    # ``state.rejected`` as well as refused to its caller.
    @workflow.update
    async def call_function(self, raw: RawValue = NO_PAYLOAD) -> CallFunctionResult:
        req = self.request("call_function", raw, CallFunctionRequest)
        calls = self.functions
        if req.event_id in calls.running:  # the same call again (a resumed agent): run it once
            await workflow.wait_condition(lambda: req.event_id in calls.results)
        if req.event_id in calls.results:
            return calls.results[req.event_id]
        if req.event_id in calls.done:
            return budget.already_ran(self.call.flow_state.node)
        calls.running.add(req.event_id)
        try:
            return await self.run_call_function(req)
        except Exception as exc:
            if internal_error(exc) or isinstance(exc, ApplicationError):
                raise
            self.record_rejected(
                req.event_id, f"function '{req.name[:64]}' failed in the workflow: {type(exc).__name__}"
            )
            out = CallFunctionResult(
                result={"status": "error", "error": "the call could not run it"},
                error=True,
                node=self.call.flow_state.node,
            )
            calls.results[req.event_id] = out
            return out
        finally:
            calls.running.discard(req.event_id)

    async def run_call_function(self, req: CallFunctionRequest) -> CallFunctionResult:
        if not self.tools_ready:
            await workflow.wait_condition(lambda: self.tools_ready)
        await self.caught_up(req.after_seq)
        step = self.engine.apply(
            self.call.flow_state, FunctionCalled(name=req.name, args=req.args, node=req.node, at=req.at)
        )
        run = next((e for e in step.effects if isinstance(e, RunFunction)), None)
        self.call.flow_state = step.state
        self.apply_effects(step.effects, skip_run=run.run_id if run else None)
        effects = list(step.effects)
        if run is not None:
            effects += self.step(await self.run_tool(req.event_id, run)).effects
        out = self.function_result(effects)
        self.functions.remember(req.event_id, out)
        self.seen_agent()
        return out

    @call_function.validator
    def validate_call_function(self, raw: RawValue = NO_PAYLOAD) -> None:
        req = self.valid_request("call_function", raw, CallFunctionRequest)
        if req is None:
            return  # malformed: refused and recorded by the handler
        if self.functions.known(req.event_id):
            return
        if self.call.flow_state.ended and self.call.flow_state.node not in self.end_nodes():
            raise ValueError("the call has ended")
        if (problem := oversized_args(req.name, req.args)) is not None:
            raise ValueError(problem)
        if req.node != self.call.flow_state.node and req.after_seq < self.inbox.next_seq:
            raise ValueError(f"the call is on node '{self.call.flow_state.node}', not '{req.node}'")

    @workflow.update
    async def attach(self, raw: RawValue = NO_PAYLOAD) -> Snapshot:
        req = self.request("attach", raw, AttachRequest)
        await self.attached(req, req.settle)
        return Snapshot(
            call_id=self.inp.call_id,
            node=self.call.flow_state.node,
            state=self.call.flow_state,
            transcript_tail=self.transcript.tail(),
            ended=self.call.flow_state.ended,
            next_seq=self.inbox.next_seq,
            definition=self.inp.definition,
        )

    @attach.validator
    def validate_attach(self, raw: RawValue = NO_PAYLOAD) -> None:
        self.valid_request("attach", raw, AttachRequest)

    @workflow.update
    async def settle(self, raw: RawValue = NO_PAYLOAD) -> CallState:
        """``attach`` with ``settle`` for an agent that stays on the call (it entered an
        action node and waits for the workflow to route it): only the state goes back, not
        the flow and the transcript an attaching agent needs."""
        req = self.request("settle", raw, AttachRequest)
        await self.attached(req, settle=True)
        return self.call.flow_state

    @settle.validator
    def validate_settle(self, raw: RawValue = NO_PAYLOAD) -> None:
        self.valid_request("settle", raw, AttachRequest)

    async def attached(self, req: AttachRequest, settle: bool) -> None:
        if not self.tools_ready:  # the agent must offer the tools the workflow will run
            await workflow.wait_condition(lambda: self.tools_ready)
        if req.after_seq or settle:
            await self.caught_up(req.after_seq, settle)
        self.seen_agent(req.agent_id)
        self.call.dispatch_failures = 0

    def read(self, name: str, raw: RawValue, model: type[M]) -> M | Refusal:
        converter = workflow.payload_converter()
        payload = None if raw is NO_PAYLOAD else raw
        return read_request(name, payload, lambda r: converter.from_payload(r.payload), model)

    def valid_request(self, name: str, raw: RawValue, model: type[M]) -> M | None:
        """The request, None when it is malformed (the handler records and refuses it)."""
        if self.bad_input is not None:
            raise ValueError("the call could not start")
        got = self.read(name, raw, model)
        return None if isinstance(got, Refusal) else got

    def request(self, name: str, raw: RawValue, model: type[M]) -> M:
        got = self.read(name, raw, model)
        if isinstance(got, Refusal):
            if workflow.patched(MALFORMED_UPDATE_PATCH):
                self.record_rejected(got.event_id, got.reason)
            raise ApplicationError(got.reason, type="MalformedRequest", non_retryable=True)
        return got

    # --- queries ----------------------------------------------------------------------
    # Queries take no input; whatever a caller sends along is ignored (``*_``) rather than
    # failing the query on a payload it does not need.
    @workflow.query(name="state")
    def state_query(self, *_: Any) -> CallView:
        return call_view(self.inp, self.call, self.inbox, self.transcript.count)

    @workflow.query(name="transcript")
    def transcript_query(self, *_: Any) -> list[Turn]:
        """The turns this run holds; after continue-as-new the earlier ones are in the
        database: ``transcript_window`` says from which index, for a reader to join them."""
        return self.transcript.turns

    @workflow.query(name="transcript_window")
    def transcript_window(self, *args: Any) -> dict[str, Any]:
        """Turns from absolute index ``args[0]`` (or the oldest held), as many as fit a
        query answer: a reader pages through them, and reads indexes under ``base`` (written
        out at continue-as-new) from the database."""
        return self.transcript.window(args[0] if args and type(args[0]) is int else 0)

    @workflow.query
    def call_state(self, *_: Any) -> CallState:
        return self.call.flow_state
