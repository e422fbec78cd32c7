"""CallWorkflow: the durable owner of one call.

It runs the same pure engine as the agent, on the events the agent reports, and
applies the durable effects (functions, extraction, persistence). The agent never
waits for it on a transition: transitions arrive as signals, applied in order and
once each; only node functions, whose result the LLM needs, are updates.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from activities.dispatch import DispatchRequest
    from activities.extraction import ExtractionInput
    from activities.records import CallRecord, TranscriptAppend
    from activities.webhook import WebhookDelivery
    from callflow.effects import Effect, EndCall, Extract, Rejected, RunFunction, SetNode, ToolResponse
    from callflow.engine import Engine, Step
    from callflow.events import (
        CallStarted,
        FunctionCalled,
        HangUp,
        MaxDuration,
        UserIdle,
        UserSpoke,
    )
    from callflow.state import CallState
    from workflows import activity_calls as acts
    from workflows.inbox import Inbox
    from workflows.messages import (
        MAX_ARGS_BYTES,
        MAX_TEXT_CHARS,
        AttachRequest,
        CallEvent,
        CallFunctionRequest,
        CallFunctionResult,
        CallInput,
        Carry,
        EventBatch,
        HangupEvent,
        Heartbeat,
        RejectedEvent,
        Snapshot,
        TransitionEvent,
        Turn,
        TurnsEvent,
    )
    from workflows.record import build_record, compact_state, transcript_items
    from workflows.visibility import Visibility

TRANSCRIPT_TAIL = 50
REJECTED_TAIL = 50


@workflow.defn(name="CallWorkflow")
class CallWorkflow:
    @workflow.init
    def __init__(self, inp: CallInput) -> None:
        self.inp = inp
        self.engine = Engine(inp.definition)
        self.vis = Visibility(inp)
        self.tasks: set[asyncio.Task[Any]] = set()
        self.fn_results: dict[str, CallFunctionResult] = {}
        self.fn_running: set[str] = set()
        self.startup: list[Effect] = []
        self.wake = False
        c = inp.carry
        if c is None:
            self.status = "dialing"
            self.inbox = Inbox()
            self.transcript: list[Turn] = []
            self.transcript_base = 0  # items before this index are persisted and not carried
            self.rejected: list[RejectedEvent] = []
            self.agent_id: str | None = None
            self.dispatch_failures = 0
            self.extraction_errors: dict[str, str] = {}
            self.events_applied = 0
            self.runs = 1
            self.start_error: str | None = None
            self.hangup_seen = False
            step = self.engine.start(CallStarted(
                call_id=inp.call_id, variables=inp.variables, caller_number=inp.caller_number,
                called_number=inp.called_number, at=workflow.now().timestamp()))
            self.state = step.state
            rejected = [e for e in step.effects if isinstance(e, Rejected)]
            self.start_error = rejected[0].reason if rejected else None
            self.startup = step.effects
            self.started_at = workflow.now().timestamp()
        else:
            self.state = c.state
            self.status = c.status
            self.inbox = Inbox(c.next_seq, c.seen_ids, c.held)
            self.transcript = list(c.transcript_tail)
            self.transcript_base = c.transcript_count - len(c.transcript_tail)
            self.rejected = list(c.rejected)
            self.agent_id = c.agent_id
            self.dispatch_failures = c.dispatch_failures
            self.extraction_errors = dict(c.extraction_errors)
            self.events_applied = c.events_applied
            self.runs = c.runs + 1
            self.start_error = None
            self.hangup_seen = c.hangup_seen
            self.started_at = c.started_at or workflow.now().timestamp()
            self.startup = [Extract(node=n, fields=list(self.engine.flow.nodes[n].node.extract))
                            for n in c.pending_extractions]
        self.pending_extractions: list[str] = []
        self.last_seen = workflow.now().timestamp()

    # --- run --------------------------------------------------------------------------
    @workflow.run
    async def run(self, inp: CallInput) -> CallRecord:
        if self.start_error is not None:
            raise ApplicationError(f"call {inp.call_id} cannot start: {self.start_error}",
                                   type="InvalidCallInput", non_retryable=True)
        self.apply_effects(self.startup)
        self.vis.sync(self.state, self.status)
        settings = inp.definition.flow.settings
        deadline = self.started_at + settings.max_duration_s
        # One timer at a time, re-armed only once it has fired or when something must happen
        # sooner than it would fire. A timeout on each wait would cancel and restart a timer on
        # every wake-up: two history events per signal. The agent timeout moves later with each
        # event, so the timer may fire early; the checks below then find nothing due and re-arm.
        timer: asyncio.Task[None] | None = None
        timer_at = 0.0
        while not self.state.ended:
            now = workflow.now().timestamp()
            due = deadline
            if self.status == "live":
                due = min(due, self.last_seen + inp.agent_timeout_s)
            if timer is None or timer.done() or due < timer_at:
                if timer is not None:
                    timer.cancel()
                timer_at = due
                timer = asyncio.get_event_loop().create_task(workflow.sleep(max(0.001, due - now)))
            await workflow.wait_condition(lambda t=timer: self.wake or self.state.ended or t.done())
            self.wake = False
            self.vis.sync(self.state, self.status)
            if self.state.ended:
                break
            now = workflow.now().timestamp()
            if now >= deadline:
                self.step(MaxDuration(at=now))
            elif self.status == "live" and now - self.last_seen >= inp.agent_timeout_s:
                await self.agent_lost()
            elif self.should_continue_as_new():
                await self.continue_as_new()
        await self.final_turn()
        return await self.finish()

    async def final_turn(self) -> None:
        """An end node's last turn is still being spoken when the engine ends the call: wait
        for the agent's hangup so that turn's transcript is recorded too."""
        if self.agent_id is None or self.hangup_seen or self.state.end_reason != "completed":
            return
        try:
            await workflow.wait_condition(lambda: self.hangup_seen,
                                          timeout=timedelta(seconds=self.inp.final_turn_grace_s))
        except TimeoutError:
            self.record_rejected(None, "no hangup from the agent after the last turn")

    def should_continue_as_new(self) -> bool:
        info = workflow.info()
        busy = (info.is_continue_as_new_suggested()
                or info.get_current_history_length() > self.inp.max_history_events)
        return busy and not self.tasks and workflow.all_handlers_finished()

    async def continue_as_new(self) -> None:
        await workflow.wait_condition(lambda: workflow.all_handlers_finished() and not self.tasks)
        head = self.transcript[:-TRANSCRIPT_TAIL] if len(self.transcript) > TRANSCRIPT_TAIL else []
        if head:
            await acts.append_transcript(TranscriptAppend(
                call_id=self.inp.call_id, items=transcript_items(head, self.transcript_base)))
        tail = self.transcript[len(head):]
        next_seq, seen, held = self.inbox.carry()
        carry = Carry(
            state=self.state, status=self.status, next_seq=next_seq, held=held, seen_ids=seen,
            transcript_tail=tail, transcript_count=self.transcript_base + len(self.transcript),
            rejected=self.rejected[-REJECTED_TAIL:], agent_id=self.agent_id,
            dispatch_failures=self.dispatch_failures, extraction_errors=self.extraction_errors,
            pending_extractions=self.pending_extractions, events_applied=self.events_applied,
            started_at=self.started_at, runs=self.runs, hangup_seen=self.hangup_seen)
        workflow.continue_as_new(self.inp.model_copy(update={"carry": carry}))

    async def agent_lost(self) -> None:
        self.record_rejected(None, f"agent {self.agent_id or '?'} silent for "
                                   f"{self.inp.agent_timeout_s:g} s: agent_lost, dispatching another")
        res = await acts.dispatch_agent(DispatchRequest(call_id=self.inp.call_id, room=self.inp.room,
                                                        attempt=self.dispatch_failures + 1))
        self.last_seen = workflow.now().timestamp()
        if res.dispatched:
            self.dispatch_failures = 0
            return
        self.dispatch_failures += 1
        if self.dispatch_failures >= self.inp.max_dispatch_attempts:
            self.step(HangUp(reason="agent_lost", at=workflow.now().timestamp()))
        else:
            backoff = min(5.0, self.inp.agent_timeout_s * 2.0 ** (self.dispatch_failures - 1))
            await workflow.sleep(timedelta(seconds=backoff))
            self.last_seen = workflow.now().timestamp() - self.inp.agent_timeout_s

    async def finish(self) -> CallRecord:
        await workflow.wait_condition(lambda: not self.tasks and workflow.all_handlers_finished(),
                                      timeout=timedelta(minutes=5))
        self.status = "ended"
        record = build_record(self.inp, self.state, self.status, self.transcript, self.transcript_base,
                              self.started_at, workflow.now())
        self.state = self.state.model_copy(update={"disposition": record.disposition})
        self.vis.sync(self.state, self.status)
        await acts.persist(record)
        await acts.webhook(WebhookDelivery(record=record, run_id=workflow.info().first_execution_run_id,
                                           sent_at=workflow.now()))
        self.vis.count_end(self.state)
        return record

    # --- engine and effects -----------------------------------------------------------
    def step(self, event: Any) -> Step:
        before = self.state.node
        step = self.engine.apply(self.state, event)
        self.state = step.state
        self.events_applied += 1
        self.apply_effects(step.effects)
        if self.state.node != before:
            self.vis.count_transition()
        self.wake = True
        return step

    def apply_effects(self, effects: list[Effect], skip_run: int | None = None) -> None:
        for eff in effects:
            if isinstance(eff, RunFunction) and eff.run_id != skip_run:
                self.spawn(self.run_in_background(eff))
            elif isinstance(eff, Extract):
                self.pending_extractions.append(eff.node)
                self.spawn(self.extract(eff))
            elif isinstance(eff, SetNode | EndCall):
                self.wake = True

    def spawn(self, coro: Any) -> None:
        task = asyncio.get_event_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def run_in_background(self, eff: RunFunction) -> None:
        result = await acts.run_function(eff, self.inp.definition, self.state)
        self.step(result)

    async def extract(self, eff: Extract) -> None:
        items = [t.model_dump() for t in self.transcript if t.node == eff.node and t.text]
        if not items:  # nothing was said on the node: nothing to extract, no LLM call
            self.pending_extractions.remove(eff.node)
            return
        try:
            out = await acts.extract(ExtractionInput(call_id=self.inp.call_id, node=eff.node,
                                                     fields=eff.fields, transcript=items))
            self.extraction_errors.pop(eff.node, None)
            self.step_values(eff.node, out.values)
        except Exception as exc:
            cause = getattr(exc, "cause", None) or exc
            self.extraction_errors[eff.node] = str(cause)[:500]
        finally:
            if eff.node in self.pending_extractions:
                self.pending_extractions.remove(eff.node)

    def step_values(self, node: str, values: dict[str, Any]) -> None:
        from callflow.events import ExtractionResult

        self.step(ExtractionResult(node=node, values=values, at=workflow.now().timestamp()))

    def record_rejected(self, event_id: str | None, reason: str) -> None:
        self.rejected.append(RejectedEvent(event_id=event_id, reason=reason[:500],
                                           at=workflow.now().timestamp()))
        if len(self.rejected) > REJECTED_TAIL * 2:
            self.rejected = self.rejected[-REJECTED_TAIL:]

    # --- messages from the agent ------------------------------------------------------
    @workflow.signal
    def events(self, batch: EventBatch) -> None:
        for ev in batch.events:
            self.receive(ev.model_dump())

    @workflow.signal
    def transition(self, ev: TransitionEvent) -> None:
        self.receive(ev.model_dump())

    @workflow.signal
    def turns(self, ev: TurnsEvent) -> None:
        self.receive(ev.model_dump())

    @workflow.signal
    def event(self, ev: CallEvent) -> None:
        self.receive(ev.model_dump())

    @workflow.signal
    def hangup(self, ev: HangupEvent) -> None:
        self.receive(ev.model_dump())

    @workflow.signal
    def heartbeat(self, hb: Heartbeat) -> None:
        self.seen_agent(hb.agent_id)

    def seen_agent(self, agent_id: str | None = None) -> None:
        self.last_seen = workflow.now().timestamp()
        if agent_id:
            self.agent_id = agent_id
        if self.status == "dialing" and not self.state.ended:
            self.status = "live"
            self.wake = True

    def receive(self, raw: dict[str, Any]) -> None:
        if raw.get("type") == "heartbeat":
            self.seen_agent(raw.get("agent_id"))
            return
        ready, refused = self.inbox.accept(raw)
        if refused:
            self.record_rejected(raw.get("event_id"), refused)
        for ev in ready:
            self.seen_agent()
            self.vis.observe_lag(ev.get("at"))
            try:
                self.apply_event(ev)
            except (ValidationError, ValueError) as exc:
                self.record_rejected(ev.get("event_id"), f"malformed event: {exc}")

    def apply_event(self, ev: dict[str, Any]) -> None:
        kind, at, event_id = ev["type"], ev.get("at"), ev.get("event_id")
        if kind == "transition":
            step = self.step(FunctionCalled(name=ev["name"], args=ev.get("args") or {},
                                            node=ev["from_node"], at=at))
            for eff in step.effects:
                if isinstance(eff, Rejected):
                    self.record_rejected(event_id, eff.reason)
                elif isinstance(eff, ToolResponse) and eff.error:
                    self.record_rejected(event_id, str((eff.result or {}).get("error", "error")))
        elif kind == "turns":
            turns = [Turn.model_validate(t) for t in ev["items"]]
            too_long = [i for i, t in enumerate(turns) if len(t.text) > MAX_TEXT_CHARS]
            if too_long:
                i = too_long[0]
                self.record_rejected(event_id, f"turn {i} has {len(turns[i].text)} characters; the limit "
                                               f"is {MAX_TEXT_CHARS}: the batch was not recorded")
                return
            for t in turns:
                self.transcript.append(t if t.node else t.model_copy(update={"node": self.state.node}))
                if t.role == "user" and t.text:
                    self.step(UserSpoke(at=at))
        elif kind == "event":
            if ev["kind"] == "user_idle":
                self.step(UserIdle(at=at))
            elif ev["kind"] == "user_spoke":
                self.step(UserSpoke(at=at))
            elif ev["kind"] == "agent_detached":
                self.record_rejected(event_id, "note: agent detached")
        elif kind == "hangup":
            reason = ev.get("reason") or "user_hangup"
            self.hangup_seen = True
            if not self.state.ended:
                self.step(MaxDuration(at=at) if reason == "max_duration" else HangUp(reason=reason, at=at))

    # --- updates ----------------------------------------------------------------------
    @workflow.update
    async def call_function(self, req: CallFunctionRequest) -> CallFunctionResult:
        if req.event_id in self.fn_running:  # the same call again (a resumed agent): run it once
            await workflow.wait_condition(lambda: req.event_id in self.fn_results)
        if req.event_id in self.fn_results:
            return self.fn_results[req.event_id]
        self.fn_running.add(req.event_id)
        try:
            return await self.run_call_function(req)
        finally:
            self.fn_running.discard(req.event_id)

    async def run_call_function(self, req: CallFunctionRequest) -> CallFunctionResult:
        await self.caught_up(req.after_seq)
        step = self.engine.apply(self.state, FunctionCalled(name=req.name, args=req.args, node=req.node,
                                                            at=req.at))
        run = next((e for e in step.effects if isinstance(e, RunFunction)), None)
        self.state = step.state
        self.apply_effects(step.effects, skip_run=run.run_id if run else None)
        effects = list(step.effects)
        if run is not None:
            result = await acts.run_function(run, self.inp.definition, self.state)
            effects += self.step(result).effects
        out = self.function_result(effects)
        self.fn_results[req.event_id] = out
        if len(self.fn_results) > 200:
            self.fn_results.pop(next(iter(self.fn_results)))
        self.seen_agent()
        return out

    @call_function.validator
    def validate_call_function(self, req: CallFunctionRequest) -> None:
        if req.event_id in self.fn_results or req.event_id in self.fn_running:
            return
        if self.state.ended and self.state.node not in self.end_nodes():
            raise ValueError("the call has ended")
        if len(str(req.args)) > MAX_ARGS_BYTES:
            raise ValueError(f"arguments larger than {MAX_ARGS_BYTES} bytes")
        if req.node != self.state.node and req.after_seq < self.inbox.next_seq:
            raise ValueError(f"the call is on node '{self.state.node}', not '{req.node}'")

    def end_nodes(self) -> set[str]:
        return {n for n, cn in self.engine.flow.nodes.items() if cn.node.type == "end"}

    def function_result(self, effects: list[Effect]) -> CallFunctionResult:
        resp = next((e for e in effects if isinstance(e, ToolResponse)), None)
        rejected = next((e for e in effects if isinstance(e, Rejected)), None)
        moved = any(isinstance(e, SetNode) for e in effects)
        decision = "end" if self.state.ended else ("transition" if moved else "stay")
        if resp is None:
            resp = ToolResponse(name="", error=rejected is not None,
                                result={"status": "error", "error": rejected.reason} if rejected else None)
        return CallFunctionResult(
            result=resp.result, error=resp.error, run_llm=resp.run_llm, decision=decision,
            node=self.state.node, effects=[e.model_dump() for e in effects], state=self.state)

    async def caught_up(self, after_seq: int, settle: bool = False) -> None:
        """Wait until the agent's events up to ``after_seq`` (and, with ``settle``, the
        functions they started) are applied; the agent's outbox may lag its update."""
        def ready() -> bool:
            applied = self.inbox.next_seq > after_seq
            return self.state.ended or (applied and (not settle or not self.state.pending))

        try:
            await workflow.wait_condition(ready, timeout=timedelta(seconds=60))
        except TimeoutError:
            raise ApplicationError(f"events up to seq {after_seq} did not arrive within 60 s",
                                   type="AgentOutOfSync") from None

    @workflow.update
    async def attach(self, req: AttachRequest) -> Snapshot:
        if req.after_seq or req.settle:
            await self.caught_up(req.after_seq, req.settle)
        self.seen_agent(req.agent_id)
        self.dispatch_failures = 0
        snap = self.engine.snapshot(self.state)
        return Snapshot(
            call_id=self.inp.call_id, node=self.state.node,
            prompt=snap.prompt if snap else None,
            tools=[t.openai() for t in snap.tools] if snap else [],
            state=self.state, transcript_tail=self.transcript[-TRANSCRIPT_TAIL:],
            ended=self.state.ended, next_seq=self.inbox.next_seq, definition=self.inp.definition)

    # --- queries ----------------------------------------------------------------------
    @workflow.query(name="state")
    def state_query(self) -> dict[str, Any]:
        return compact_state(self.inp, self.state, self.status, self.agent_id, self.started_at,
                             self.rejected, self.extraction_errors, self.inbox, self.runs,
                             self.transcript_base + len(self.transcript))

    @workflow.query(name="transcript")
    def transcript_query(self) -> list[Turn]:
        return self.transcript

    @workflow.query
    def call_state(self) -> CallState:
        return self.state

