"""CallWorkflow: the durable owner of one call.

It runs the same pure engine as the agent, on the events the agent reports, and
applies the durable effects (functions, extraction, persistence). The agent never
waits for it on a transition: transitions arrive as signals, applied in order and
once each; only node functions, whose result the LLM needs, are updates.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from ringflow.activities.handler_run import HandlerCheck
    from ringflow.activities.jobs import JOB_UPDATE_SIGNAL
    from ringflow.callflow.effects import Effect, Extract, Rejected, RunFunction
    from ringflow.callflow.engine import Engine
    from ringflow.callflow.errors import safe_reason
    from ringflow.callflow.events import CallStarted, FunctionCalled
    from ringflow.callflow.inputs import undeclared_variables
    from ringflow.callflow.state import CallState, extraction_node
    from ringflow.contract.call import CallInput, CallView, Continuation, call_input_problems
    from ringflow.contract.events import Turn
    from ringflow.contract.records import CallRecord
    from ringflow.contract.room import RoomEvent
    from ringflow.contract.supervision import Supervision, SupervisorAnswer, SupervisorRequest
    from ringflow.contract.updates import (
        EXTRACTION_TIMEOUT_S,
        AttachRequest,
        CallFunctionRequest,
        CallFunctionResult,
        CancelRequest,
        DeviceToolRecord,
        RouteRequest,
        Snapshot,
        ValuesAnswer,
        ValuesRequest,
    )
    from ringflow.contract.wire import oversized_args
    from ringflow.workflows import budgets
    from ringflow.workflows.activity_calls import handlers_problem
    from ringflow.workflows.call_driver import CallDriver, internal_error
    from ringflow.workflows.call_progress import CallProgress, FunctionCalls, Liveness, Transcript
    from ringflow.workflows.conversation import converse
    from ringflow.workflows.device_record import DeviceTools
    from ringflow.workflows.epochs import is_stale, issue, refuse_update
    from ringflow.workflows.function_answers import answer, with_outcome
    from ringflow.workflows.inbox import Inbox
    from ringflow.workflows.intake import Refusal, intake, intake_one, read_request
    from ringflow.workflows.jobs import Jobs
    from ringflow.workflows.journal_recovery import recover_journal
    from ringflow.workflows.mcp_pin import needs_pin, pin_tools
    from ringflow.workflows.patches import FUNCTION_REPEAT_RUNS
    from ringflow.workflows.record import call_view
    from ringflow.workflows.recording import Recording
    from ringflow.workflows.room_events import on_room_event
    from ringflow.workflows.run_end import RunEnd
    from ringflow.workflows.supervision import refusal, take
    from ringflow.workflows.visibility import Visibility

NO_PAYLOAD = RawValue(Payload())  # an update sent with no payload (the handlers' default)
M = TypeVar("M", bound=BaseModel)


@workflow.defn(name="CallWorkflow")
class CallWorkflow:
    """The workflow's lifecycle and message handlers. What acts on the call is in the parts
    it owns, each given the call's driver (``call_driver.py``): the conversation loop
    (``conversation.py``), continue-as-new and finish (``run_end.py``), job groups
    (``jobs.py``) and device tools (``device_record.py``)."""

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
        engine = Engine(inp.definition)
        if engine.definition is not inp.definition:
            # The flow as compiled once for every call of it (callflow.compiled), equal
            # in content to the one decoded: a worker holds a thousand live calls, and a
            # copy of the flow each was a quarter of the objects its collector walks.
            inp = inp.model_copy(update={"definition": engine.definition})
        vis = Visibility(inp)
        self.room_events_seen: list[str] = []  # LiveKit webhooks applied (workflows/room_events.py)
        self.start_error: str | None = None
        now = workflow.now().timestamp()
        # One way in: a new call starts from the continuation of a run zero (``first_run``).
        c = inp.carry if inp.carry is not None else self.first_run(engine, inp, now)
        if inp.carry is not None:  # extractions the last run left running start again
            self.startup: list[Effect] = [
                Extract(
                    node=extraction_node(x),
                    id=x if "#" in x else "",
                    fields=list(engine.flow.nodes[extraction_node(x)].node.extract),
                )
                for x in c.pending_extractions
            ]
        self.tools_ready = not needs_pin(inp)  # MCP tools are pinned first (workflows/mcp_pin.py)
        self.d = CallDriver(
            inp,
            engine,
            vis,
            CallProgress.continued(c, now),
            Inbox(c.next_seq, c.seen_ids, c.held, c.held_since),
            FunctionCalls.continued(c),
            Transcript.continued(c),
            Liveness(inp.agent_timeout_s, now),
        )
        recording = Recording(self.d)
        self.d.on_step = recording.maybe_start
        self.run_end = RunEnd(self.d, recording)
        self.jobs = Jobs(self.d)
        self.d.start_jobs = self.jobs.start_jobs
        self.devices = DeviceTools(self.d)

    def first_run(self, engine: Engine, inp: CallInput, now: float) -> Continuation:
        """A new call: the engine starts it, and what it orders first runs once the call does."""
        step = engine.start(
            CallStarted(
                call_id=inp.call_id,
                variables=inp.variables,
                caller_number=inp.caller_number,
                called_number=inp.called_number,
                at=now,
                journey=inp.journey,
            )
        )
        rejected = [e for e in step.effects if isinstance(e, Rejected)]
        self.start_error = rejected[0].reason if rejected else None
        self.startup = step.effects
        return Continuation(state=step.state, status="dialing", next_seq=1, runs=0, started_at=now)

    # --- run --------------------------------------------------------------------------
    @workflow.run
    async def run(self, raw: RawValue) -> CallRecord:
        if self.bad_input is not None:
            raise ApplicationError(
                f"CallWorkflow cannot start: its input is not a CallInput: {self.bad_input}",
                type="InvalidCallInput",
                non_retryable=True,
            )
        inp = self.d.inp
        if self.start_error is not None:
            raise ApplicationError(
                f"call {inp.call_id} cannot start: {self.start_error}",
                type="InvalidCallInput",
                non_retryable=True,
            )
        undeclared = undeclared_variables(inp.definition.flow, inp.variables) if inp.carry is None else []
        if undeclared:  # a client that skipped the check
            raise ApplicationError(
                f"call {inp.call_id} cannot start: " + "; ".join(str(i) for i in undeclared[:10]),
                type="InvalidCallInput",
                non_retryable=True,
            )
        too_long = call_input_problems(inp) if inp.carry is None else []
        if too_long:
            raise ApplicationError(
                f"call {inp.call_id} cannot start: " + "; ".join(too_long),
                type="InvalidCallInput",
                non_retryable=True,
            )
        if inp.flow_ref is not None and inp.flow_ref.handlers and inp.carry is None:
            problem = await handlers_problem(
                HandlerCheck(
                    version=inp.flow_ref.version,
                    flow_source=inp.definition.source,
                    handlers=inp.flow_ref.handlers,
                )
            )
            if problem is not None:
                raise ApplicationError(
                    f"call {inp.call_id} cannot start: {problem}", type="InvalidCallInput", non_retryable=True
                )
        if not self.tools_ready:
            await pin_tools(self.d)
        self.tools_ready = True
        try:
            await converse(self.d, self.run_end, inp, self.startup)
        except Exception as exc:
            if internal_error(exc):
                raise
            # A bug or an input nothing anticipated: the call ends with an error, and its record
            # and webhook still go out, rather than a workflow task that fails forever.
            self.d.fail_call(f"the call could not go on: {safe_reason(exc)}")
        return await self.run_end.finish()

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
                    on_room_event(self.d, ev, self.room_events_seen)
                else:
                    self.d.take(ev)  # type: ignore[arg-type]
                return
            if name == "hangup":  # not the agent's: it may still hold turns (journal_recovery.py)
                self.d.hangup_signalled = True
            for item in intake(name, payloads, decode):
                self.d.take(item)
        except Exception as exc:
            if internal_error(exc):
                raise
            self.d.record_rejected(None, f"signal '{name[:64]}' could not be applied: {type(exc).__name__}")

    # --- updates ----------------------------------------------------------------------
    # Updates take their payload raw, like signals: a malformed one is accepted by the
    # validator and refused by the handler (``request``), so it is recorded in
    # ``state.rejected`` as well as refused to its caller.
    @workflow.update
    async def call_function(self, raw: RawValue = NO_PAYLOAD) -> CallFunctionResult:
        req = self.request("call_function", raw, CallFunctionRequest)
        refuse_update(self.d, "call_function", req.epoch, req.event_id)
        calls = self.d.functions
        if req.event_id in calls.running:  # the same call again (a resumed agent): run it once
            # ... or run it here when the first was refused without a result (its agent was
            # superseded while it waited for the agent's events): that one never answers
            rerun = workflow.patched(FUNCTION_REPEAT_RUNS)
            await workflow.wait_condition(
                lambda: req.event_id in calls.results or (rerun and req.event_id not in calls.running)
            )
        if req.event_id in calls.results:
            return answer(req, calls.results[req.event_id])
        if req.event_id in calls.done:
            return budgets.already_ran(self.d.call.flow_state.node)
        calls.running.add(req.event_id)
        try:
            return answer(req, await self.run_call_function(req))
        except Exception as exc:
            if internal_error(exc) or isinstance(exc, ApplicationError):
                raise
            self.d.record_rejected(
                req.event_id, f"function '{req.name[:64]}' failed in the workflow: {type(exc).__name__}"
            )
            out = CallFunctionResult(
                result={"status": "error", "error": "the call could not run it"},
                error=True,
                node=self.d.call.flow_state.node,
            )
            calls.results[req.event_id] = out
            return out
        finally:
            calls.running.discard(req.event_id)

    async def run_call_function(self, req: CallFunctionRequest) -> CallFunctionResult:
        if not self.tools_ready:
            await workflow.wait_condition(lambda: self.tools_ready)
        await self.d.caught_up(req.after_seq)
        refuse_update(self.d, "call_function", req.epoch, req.event_id)  # replaced while it waited
        before = self.d.call.flow_state
        called = FunctionCalled(name=req.name, args=req.args, node=req.node, at=req.at)
        step = self.d.engine.apply(before, called)
        run = next((e for e in step.effects if isinstance(e, RunFunction)), None)
        self.d.call.flow_state = step.state
        self.d.apply_effects(step.effects, skip_run=run.run_id if run else None)
        effects = list(step.effects)
        outcome = None
        if run is not None:
            outcome = await self.d.run_tool(req.event_id, run)
            effects += self.d.step(outcome).effects
        out = self.d.function_result(effects)
        if req.state_digest is not None and outcome is not None:  # an agent that takes steps itself
            out = with_outcome(self.d.engine, before, called, outcome, effects, out, self.d.call.flow_state)
        self.d.functions.remember(req.event_id, out)
        self.d.seen_agent()
        return out

    @call_function.validator
    def validate_call_function(self, raw: RawValue = NO_PAYLOAD) -> None:
        req = self.valid_request("call_function", raw, CallFunctionRequest)
        if req is None or is_stale(self.d, req.epoch):
            return  # malformed, or from a replaced agent: refused and recorded by the handler
        if self.d.functions.known(req.event_id):
            return
        if self.d.call.flow_state.ended and self.d.call.flow_state.node not in self.d.end_nodes():
            raise ValueError("the call has ended")
        if (problem := oversized_args(req.name, req.args)) is not None:
            raise ValueError(problem)
        if req.node != self.d.call.flow_state.node and req.after_seq < self.d.inbox.next_seq:
            raise ValueError(f"the call is on node '{self.d.call.flow_state.node}', not '{req.node}'")

    @workflow.update
    async def attach(self, raw: RawValue = NO_PAYLOAD) -> Snapshot:
        req = self.request("attach", raw, AttachRequest)
        refuse_update(self.d, "attach", req.epoch)
        await self.attached(req, req.settle)
        if req.epoch is None:  # a new agent: the next epoch, in this task with its snapshot
            issue(self.d, req.agent_id)
        return Snapshot(
            call_id=self.d.inp.call_id,
            node=self.d.call.flow_state.node,
            state=self.d.call.flow_state,
            transcript_tail=self.d.transcript.tail(),
            ended=self.d.call.flow_state.ended,
            next_seq=self.d.inbox.next_seq,
            definition=self.d.inp.definition,
            flow_ref=self.d.inp.flow_ref,
            epoch=self.d.call.epoch,
            derives=True,
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
        refuse_update(self.d, "settle", req.epoch)
        await self.attached(req, settle=True)
        return self.d.call.flow_state

    @settle.validator
    def validate_settle(self, raw: RawValue = NO_PAYLOAD) -> None:
        self.valid_request("settle", raw, AttachRequest)

    async def attached(self, req: AttachRequest, settle: bool) -> None:
        if not self.tools_ready:  # the agent must offer the tools the workflow will run
            await workflow.wait_condition(lambda: self.tools_ready)
        if not settle and self.d.call.agent_id is not None:
            # A resume: what the agent before left in its journal, before this one is told
            # the next seq and the transcript (workflows/journal_recovery.py).
            await recover_journal(self.d, f"agent {req.agent_id} attached")
        if req.after_seq or settle:
            await self.d.caught_up(req.after_seq, settle)
        refuse_update(self.d, "settle" if settle else "attach", req.epoch)  # replaced while it waited
        self.d.seen_agent(req.agent_id if req.epoch is None or not self.d.call.epoch else None)
        self.d.call.dispatch_failures = 0

    @workflow.update
    async def values(self, raw: RawValue = NO_PAYLOAD) -> ValuesAnswer:
        """A running extraction's result, for the agent to apply where its events say
        (``CallDriver.extract``): answered once it is known, or after
        ``EXTRACTION_TIMEOUT_S`` with an error, the fallback both sides then take."""
        req = self.request("values", raw, ValuesRequest)
        refuse_update(self.d, "values", req.epoch)
        await self.d.caught_up(req.after_seq)
        try:
            await workflow.wait_condition(
                lambda: self.d.values_for(req.id) is not None,
                timeout=timedelta(seconds=EXTRACTION_TIMEOUT_S + 5),
            )
        except TimeoutError:
            refuse_update(self.d, "values", req.epoch)  # replaced while it waited
            xid = req.id
            return ValuesAnswer(
                id=xid, node=extraction_node(xid), error="the extraction did not finish in time"
            )
        refuse_update(self.d, "values", req.epoch)  # replaced while it waited
        answer = self.d.values_for(req.id)
        assert answer is not None
        return answer

    @values.validator
    def validate_values(self, raw: RawValue = NO_PAYLOAD) -> None:
        self.valid_request("values", raw, ValuesRequest)

    # --- supervisors (workflows/supervision.py) ---------------------------------------
    @workflow.update
    async def supervise(self, raw: RawValue = NO_PAYLOAD) -> SupervisorAnswer:
        """A supervisor's whisper, takeover or hand-back (``ringflow call whisper|takeover|
        handback``): recorded here, the durable event, then applied by the call's agent."""
        req = self.request("supervise", raw, SupervisorRequest)
        problem = refusal(self.d, req)
        if problem is not None:  # the state changed between the validator and here
            raise ApplicationError(problem, type="SupervisorRefused", non_retryable=True)
        return take(self.d, req)

    @supervise.validator
    def validate_supervise(self, raw: RawValue = NO_PAYLOAD) -> None:
        req = self.valid_request("supervise", raw, SupervisorRequest)
        if req is not None and (problem := refusal(self.d, req)) is not None:
            raise ValueError(problem)

    @workflow.query(name="supervision")
    def supervision_query(self, *_: Any) -> Supervision:
        """The call's supervisors: polled by its agent, which applies what it has not yet."""
        return self.d.call.supervision

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
            self.d.record_rejected(got.event_id, got.reason)
            raise ApplicationError(got.reason, type="MalformedRequest", non_retryable=True)
        return got

    # --- job groups (workflows/jobs.py) and device tools (workflows/device_record.py) -------
    @workflow.signal(name=JOB_UPDATE_SIGNAL)
    def on_job_update(self, data: Any) -> None:
        """A job's progress (``flow_manager.update``), sent by its activity."""
        if self.bad_input is None:
            self.jobs.on_job_update(data)

    @workflow.query(name="jobs_feed")
    def jobs_feed(self, *args: Any) -> dict[str, Any]:
        return self.jobs.jobs_feed(*args)

    @workflow.update(name="route_jobs")
    async def route_jobs(self, req: RouteRequest) -> CallFunctionResult:
        refuse_update(self.d, "route_jobs", req.epoch)
        return await self.jobs.route_jobs(req)

    @route_jobs.validator
    def validate_route_jobs(self, req: RouteRequest) -> None:
        if isinstance(req, RouteRequest) and is_stale(self.d, req.epoch):
            return  # refused and recorded by the handler
        self.jobs.validate_route_jobs(req)

    @workflow.update(name="cancel_jobs")
    async def cancel_jobs(self, req: CancelRequest) -> dict[str, Any]:
        refuse_update(self.d, "cancel_jobs", req.epoch)
        return await self.jobs.cancel_jobs(req)

    @cancel_jobs.validator
    def validate_cancel_jobs(self, req: CancelRequest) -> None:
        self.jobs.validate_cancel_jobs(req)

    @workflow.query(name="function_answer")
    def function_answer(self, *args: Any) -> dict[str, Any] | None:
        return self.devices.function_answer(*args)

    @workflow.update(name="record_device_tool")
    async def record_device_tool(self, rec: DeviceToolRecord) -> CallFunctionResult:
        refuse_update(self.d, "record_device_tool", rec.epoch, rec.event_id)
        return await self.devices.record_device_tool(rec)

    @record_device_tool.validator
    def validate_record_device_tool(self, rec: DeviceToolRecord) -> None:
        if self.bad_input is not None:
            raise ValueError("record_device_tool takes one DeviceToolRecord (JSON)")
        if isinstance(rec, DeviceToolRecord) and is_stale(self.d, rec.epoch):
            return  # refused and recorded by the handler
        self.devices.validate_record_device_tool(rec)

    # --- queries ----------------------------------------------------------------------
    # Queries take no input; whatever a caller sends along is ignored (``*_``) rather than
    # failing the query on a payload it does not need.
    @workflow.query(name="state")
    def state_query(self, *_: Any) -> CallView:
        return call_view(self.d.inp, self.d.call, self.d.inbox, self.d.transcript.count)

    @workflow.query(name="transcript")
    def transcript_query(self, *_: Any) -> list[Turn]:
        """The turns this run holds; after continue-as-new the earlier ones are in the
        database: ``transcript_window`` says from which index, for a reader to join them."""
        return self.d.transcript.turns

    @workflow.query(name="transcript_window")
    def transcript_window(self, *args: Any) -> dict[str, Any]:
        """Turns from absolute index ``args[0]`` (or the oldest held), as many as fit a
        query answer: a reader pages through them, and reads indexes under ``base`` (written
        out at continue-as-new) from the database."""
        return self.d.transcript.window(args[0] if args and type(args[0]) is int else 0)

    @workflow.query
    def call_state(self, *_: Any) -> CallState:
        return self.d.call.flow_state

    @workflow.query(name="agent_epoch")
    def agent_epoch(self, *_: Any) -> int:
        """The current agent's epoch: an agent without a lease asks it with each heartbeat,
        and stops once a newer attach replaced it (``agents/runner.py``)."""
        return self.d.call.epoch
