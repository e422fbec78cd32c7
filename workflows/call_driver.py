"""The call's engine driver: engine steps, durable effects, the agent's events.

``CallWorkflow`` (``call.py``) owns one and hands it to the parts that act on the call
(carry and finish, job groups, device tools, line and room events): it holds the call's
progress and its parts, not the workflow's handlers. Deterministic like any workflow code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError
from temporalio.workflow import NondeterminismError, ReadOnlyContextError

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from ringflow.activities.extraction import ExtractionInput
    from ringflow.callflow.effects import (
        Effect,
        EndCall,
        Extract,
        Rejected,
        RunFunction,
        SetNode,
        StartJobs,
        ToolResponse,
    )
    from ringflow.callflow.engine import Engine, Step
    from ringflow.callflow.errors import safe_reason
    from ringflow.callflow.events import (
        ExtractionResult,
        FunctionCalled,
        FunctionResult,
        HangUp,
        MaxDuration,
        UserSpoke,
    )
    from ringflow.callflow.state import extraction_node
    from ringflow.contract.call import CallInput
    from ringflow.contract.events import (
        CallEvent,
        HangupEvent,
        Heartbeat,
        InboxEvent,
        RejectedEvent,
        Tombstone,
        TransitionEvent,
        Turn,
        TurnsEvent,
    )
    from ringflow.contract.updates import CallFunctionResult, ValuesAnswer
    from ringflow.contract.wire import MAX_ID_CHARS, MAX_TEXT_CHARS
    from ringflow.workflows import activity_calls as acts
    from ringflow.workflows.call_progress import CallProgress, FunctionCalls, Liveness, Transcript
    from ringflow.workflows.epochs import refused_event
    from ringflow.workflows.inbox import Inbox
    from ringflow.workflows.intake import Refusal, explain, tombstone
    from ringflow.workflows.line_events import apply_line_event
    from ringflow.workflows.supervision import apply_supervisor_event
    from ringflow.workflows.visibility import Visibility

REJECTED_TAIL = 50


def _public(eff: Effect) -> Effect:
    """An effect as it may go into an update's result, and so into the history: an HTTP
    request's rendered URL, headers and body carry the flow's credentials (``Authorization``)
    and are for the activity alone. The agent ignores ``run_function`` effects anyway."""
    if isinstance(eff, RunFunction) and (eff.http is not None or eff.http_values is not None):
        return eff.model_copy(update={"http": None, "http_values": None})
    return eff


def internal_error(exc: BaseException) -> bool:
    """Errors that belong to Temporal's machinery (replay found other code, a handler wrote
    state where it may only read): re-raised, never taken for a bad input."""
    return isinstance(exc, NondeterminismError | ReadOnlyContextError)


class CallDriver:
    """Applies the engine's steps and their effects to the call's progress and parts, which
    it receives ready (``CallWorkflow.setup``); what the flow starts elsewhere (a job
    group) goes to the callback it is given."""

    def __init__(
        self,
        inp: CallInput,
        engine: Engine,
        vis: Visibility,
        call: CallProgress,
        inbox: Inbox,
        functions: FunctionCalls,
        transcript: Transcript,
        liveness: Liveness,
    ) -> None:
        self.inp = inp
        self.engine = engine
        self.vis = vis
        self.call = call  # the call's state, carried across continue-as-new (with the parts below)
        self.inbox = inbox
        self.functions = functions
        self.transcript = transcript
        self.liveness = liveness
        self.tasks: set[asyncio.Task[Any]] = set()
        self.pending_extractions: list[str] = []
        self.final_extracts: list[Extract] = []
        self.wake = False
        self.ringing = False  # an outbound dial is under way (workflows/dialing.py): not live yet
        self.agent_left = False  # LiveKit said the call's agent left after the call ended
        self.hangup_signalled = False  # an operator's (or LiveKit's) hangup, not the agent's
        self.start_jobs: Callable[[StartJobs], None] = lambda eff: None  # workflows/jobs.py
        # after each engine step: the recording starts on the step that reaches its consent
        # node, even when the call ends in the same workflow task (workflows/recording.py)
        self.on_step: Callable[[], None] = lambda: None

    @property
    def room(self) -> str:
        """The call's LiveKit room, as it was given at the start: a dialed call's (named
        after the call unless told otherwise), an inbound call's (named by LiveKit's dispatch
        rule). Not the call id: the two differ whenever the room was named elsewhere."""
        return self.inp.room or self.inp.call_id

    def step(self, event: Any) -> Step:
        before = self.call.flow_state.node
        step = self.engine.apply(self.call.flow_state, event)
        self.call.flow_state = step.state
        self.call.events_applied += 1
        self.apply_effects(step.effects)
        if self.call.flow_state.node != before:
            self.vis.count_transition()
            self.on_step()
        self.wake = True
        return step

    def apply_effects(self, effects: list[Effect], skip_run: int | None = None) -> None:
        for eff in effects:
            if isinstance(eff, RunFunction) and eff.run_id != skip_run:
                self.spawn(self.run_in_background(eff))
            elif (
                isinstance(eff, Extract)
                and self.call.flow_state.ended
                and eff.node == self.call.flow_state.node
            ):
                self.final_extracts.append(eff)  # after the last turn is in: see agent_presence.final_turn()
            elif isinstance(eff, Extract):
                self.pending_extractions.append(eff.id or eff.node)
                self.spawn(self.extract(eff))
            elif isinstance(eff, SetNode | EndCall):
                self.wake = True
            elif isinstance(eff, StartJobs):
                self.start_jobs(eff)

    def spawn(self, coro: Any) -> None:
        task = asyncio.get_event_loop().create_task(self.guarded(coro))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def guarded(self, coro: Any) -> None:
        """Background work (a function the engine ordered, an extraction) that raises
        leaves the call unable to go on: it ends with ``error`` instead of a workflow task
        that fails forever."""
        try:
            await coro
        except Exception as exc:
            if internal_error(exc):
                raise
            self.fail_call(f"background work failed: {safe_reason(exc)}")

    async def run_in_background(self, eff: RunFunction) -> None:
        result = await acts.run_function(
            eff, self.inp.definition, self.call.flow_state, lambda: self.call.handler_state, room=self.room
        )
        self.note_retrieval(eff, result)
        self.step(result)

    def note_retrieval(self, run: RunFunction, result: FunctionResult) -> None:
        """A knowledge search goes into the transcript as a ``tool`` turn: the query and the
        sources of the passages the LLM was given, so the call's record says where an
        answer came from."""
        if run.kind != "knowledge":
            return
        out = result.result if isinstance(result.result, dict) else {}
        cited = [
            f"{p.get('source')}#{p.get('chunk')}" for p in out.get("passages") or [] if isinstance(p, dict)
        ]
        query = str(run.args.get("query", ""))[:300]
        if result.error or out.get("status") != "ok":
            said = f"knowledge search '{query}' failed: {result.error or out.get('error')}"
        else:
            version = out.get("version")
            said = f"knowledge search '{query}' (version {version}): {', '.join(cited) or 'no passages'}"
        now = workflow.now().timestamp()
        self.transcript.add(
            Turn(role="tool", text=said[:MAX_TEXT_CHARS], node=run.node, started_at=now, ended_at=now)
        )

    async def extract(self, eff: Extract) -> None:
        """Run the node's extraction (bounded: ``EXTRACTION_TIMEOUT_S``). Its result, values
        or the error every reader then falls back on, is not applied here while the call
        runs: the agent applies it where its events say (``values``, ``apply_extracted``),
        so both engines take it at the same step. Once the call has ended it is applied at
        once (the record's values and disposition)."""
        key = eff.id or eff.node
        items = [t.model_dump() for t in self.transcript.turns if t.node == eff.node and t.text]
        values: dict[str, Any] = {}
        error: str | None = None
        try:
            if items:  # nothing was said on the node: nothing to extract, no LLM call
                out = await acts.extract(
                    ExtractionInput(
                        call_id=self.inp.call_id, node=eff.node, fields=eff.fields, transcript=items
                    )
                )
                values = out.values
                self.call.extraction_errors.pop(eff.node, None)
        except Exception as exc:
            cause = getattr(exc, "cause", None) or exc
            error = str(cause)[:500] or type(cause).__name__
            self.call.extraction_errors[eff.node] = error
        finally:
            if key in self.pending_extractions:
                self.pending_extractions.remove(key)
        result = ExtractionResult(
            node=eff.node, id=eff.id or None, values=values, error=error, at=workflow.now().timestamp()
        )
        if not eff.id or self.call.flow_state.ended:
            self.settle_values()
            if error is None or eff.id:
                self.step(result)
        elif eff.id in self.call.flow_state.extracting:
            self.call.values_ready.append(result)
            self.wake = True

    def settle_values(self) -> None:
        """The call has ended: the results no agent applied are applied now, in order."""
        ready, self.call.values_ready = self.call.values_ready, []
        for result in ready:
            self.step(result)

    def values_for(self, xid: str) -> ValuesAnswer | None:
        """The answer to the agent's ``values`` for extraction ``xid``, None while it runs."""
        state = self.call.flow_state
        found = next((r for r in self.call.values_ready if r.id == xid), None)
        if found is not None:
            return ValuesAnswer(id=xid, node=found.node, values=found.values, error=found.error)
        if state.ended or xid not in state.extracting:
            return ValuesAnswer(id=xid, node=extraction_node(xid), gone=True)
        return None

    def apply_extracted(self, ev: CallEvent) -> None:
        """The agent's ``extracted`` event: it applied an extraction's result at this point
        of its events, so the workflow applies the same result here."""
        data = ev.data
        xid = data.get("id")
        values = data.get("values") or {}
        error = data.get("error")
        if not (
            isinstance(xid, str) and isinstance(values, dict) and (error is None or isinstance(error, str))
        ):
            self.record_rejected(ev.event_id, "extracted: needs 'id' (text), 'values' (a mapping), 'error'")
            return
        self.call.values_ready = [r for r in self.call.values_ready if r.id != xid]
        step = self.step(
            ExtractionResult(
                node=extraction_node(xid), id=xid, values=values, error=error and error[:500], at=ev.at
            )
        )
        for eff in step.effects:
            if isinstance(eff, Rejected):
                self.record_rejected(ev.event_id, eff.reason)

    def record_rejected(self, event_id: str | None, reason: str) -> None:
        self.call.rejected.append(
            RejectedEvent(event_id=event_id, reason=reason[:500], at=workflow.now().timestamp())
        )
        if len(self.call.rejected) > REJECTED_TAIL * 2:
            self.call.rejected = self.call.rejected[-REJECTED_TAIL:]

    def rearm_due(self, timer_at: float, deadline: float) -> bool:
        """Else a healthy call's liveness timer fires early, a workflow task of its own every
        agent timeout: it is moved later inside a signal's task (which runs anyway) once half
        its time is gone and the agent was seen since it was armed (issue 13)."""
        timeout = self.inp.agent_timeout_s
        if self.call.status != "live" or timer_at - workflow.now().timestamp() >= timeout / 2:
            return False
        # The due time the main loop would arm now; it must be later, or it would re-arm forever.
        due = min(self.liveness.due, deadline)
        if self.inbox.held_since is not None:
            due = min(due, self.inbox.held_since + self.inp.gap_wait_s)
        return due > timer_at

    def seen_agent(self, agent_id: str | None = None) -> None:
        self.liveness.seen(workflow.now().timestamp())
        if isinstance(agent_id, str) and 0 < len(agent_id) <= MAX_ID_CHARS:
            self.call.agent_id = agent_id
        elif agent_id:  # a raw payload's: still a sign of life, but not a name worth keeping
            self.record_rejected(
                None, f"agent id of {len(str(agent_id))} characters ignored; the limit is {MAX_ID_CHARS}"
            )
        if self.call.status == "dialing" and not self.call.flow_state.ended and not self.ringing:
            self.call.status = "live"
            self.wake = True

    def fail_call(self, reason: str) -> None:
        """End the call with reason ``error``: it cannot go on, but it must still end (its
        record saved, its webhook sent) rather than stay open forever."""
        self.record_rejected(None, reason)
        if self.call.flow_state.ended:
            return
        try:
            self.step(HangUp(reason="error", at=workflow.now().timestamp()))
        except Exception as exc:
            if internal_error(exc):
                raise
        if not self.call.flow_state.ended:  # the engine itself failed: end it by hand
            self.call.flow_state = self.call.flow_state.model_copy(
                update={"ended": True, "end_reason": "error"}
            )
        self.wake = True

    def take(self, item: InboxEvent | Refusal) -> None:
        """One item of a signal (``workflows/intake.py``): an event, or a refusal, which
        keeps its place in the seq order when it said which seq it was."""
        if isinstance(item, Refusal):
            if item.seq is None:
                self.record_rejected(item.event_id, item.reason)
                return
            item = tombstone(item, item.seq)
        self.receive(item)

    def receive(self, event: InboxEvent) -> None:
        if (fenced := refused_event(self, event)) is not None:  # a replaced agent's (workflows/epochs.py)
            self.record_rejected(getattr(event, "event_id", None), fenced)
            return
        if isinstance(event, Heartbeat):
            self.seen_agent(event.agent_id)
            self.apply_ready(*self.inbox.skip_gap(workflow.now().timestamp(), self.inp.gap_wait_s))
            return
        held = self.inbox.held_since
        ready, refused = self.inbox.accept(event, workflow.now().timestamp())
        if refused:
            self.record_rejected(event.event_id, refused)
        if held is None and self.inbox.held_since is not None:
            self.wake = True  # a gap opened: the main loop arms its timer (Inbox.skip_gap)
        self.apply_ready(ready)
        self.apply_ready(*self.inbox.skip_gap(workflow.now().timestamp(), self.inp.gap_wait_s))

    def apply_ready(self, ready: list[InboxEvent], skipped: str | None = None) -> None:
        if skipped:
            self.record_rejected(None, skipped)
        for ev in ready:
            self.seen_agent()
            self.vis.observe_lag(None if isinstance(ev, Tombstone) else ev.at)
            event_id = None if isinstance(ev, Heartbeat) else ev.event_id
            try:
                self.apply_event(ev)
            except ValidationError as exc:
                self.record_rejected(event_id, f"malformed event: {explain(exc)}")
            except ValueError as exc:
                self.record_rejected(event_id, f"malformed event: {safe_reason(exc)}")

    def apply_event(self, ev: InboxEvent) -> None:
        if isinstance(ev, Tombstone):
            self.record_rejected(ev.event_id, ev.reason or "refused")
        elif isinstance(ev, TransitionEvent):
            step = self.step(FunctionCalled(name=ev.name, args=ev.args, node=ev.from_node, at=ev.at))
            for eff in step.effects:
                if isinstance(eff, Rejected):
                    self.record_rejected(ev.event_id, eff.reason)
                elif isinstance(eff, ToolResponse) and eff.error:
                    self.record_rejected(ev.event_id, str((eff.result or {}).get("error", "error")))
        elif isinstance(ev, TurnsEvent):
            self.add_turns(ev)
        elif isinstance(ev, CallEvent) and ev.kind == "extracted":
            self.apply_extracted(ev)
        elif isinstance(ev, CallEvent) and ev.kind == "supervisor":
            apply_supervisor_event(self, ev)
        elif isinstance(ev, CallEvent):
            apply_line_event(self, ev)
        elif isinstance(ev, HangupEvent):
            self.call.hangup_seen = True
            if not self.call.flow_state.ended:
                at = ev.at
                self.step(
                    MaxDuration(at=at) if ev.reason == "max_duration" else HangUp(reason=ev.reason, at=at)
                )

    def add_turns(self, ev: TurnsEvent) -> None:
        too_long = [i for i, t in enumerate(ev.items) if len(t.text) > MAX_TEXT_CHARS]
        if too_long:
            i = too_long[0]
            self.record_rejected(
                ev.event_id,
                f"turn {i} has {len(ev.items[i].text)} characters; the limit "
                f"is {MAX_TEXT_CHARS}: the batch was not recorded",
            )
            return
        for t in ev.items:
            self.transcript.add(t if t.node else t.model_copy(update={"node": self.call.flow_state.node}))
            if t.role == "user" and t.text:
                self.step(UserSpoke(at=ev.at))

    async def run_tool(self, event_id: str, run: RunFunction) -> FunctionResult:
        """Run the function the LLM called. One marked ``cancel_on_interruption`` can be
        cancelled by the agent's ``interruption`` event while it runs (see ``interrupted``),
        or is not run at all when that event came first. The key a tool's endpoint
        de-duplicates on names the agent's event, which is answered once across retries and
        continue-as-new, never the run counter."""
        key = f"{self.inp.call_id}:{event_id}"
        if run.kind == "knowledge":
            result = await acts.run_function(run, self.inp.definition, self.call.flow_state, key=key)
            self.note_retrieval(run, result)
            return result
        if not run.cancel_on_interruption:
            return await acts.run_function(
                run,
                self.inp.definition,
                self.call.flow_state,
                lambda: self.call.handler_state,
                key=key,
                room=self.room,
            )
        if event_id in self.functions.cancel_requested:
            self.record_rejected(event_id, f"note: '{run.name}' was not run: the caller interrupted first")
            return acts.cancelled(run)
        try:
            return await acts.run_function(
                run,
                self.inp.definition,
                self.call.flow_state,
                lambda: self.call.handler_state,
                on_start=lambda h: self.functions.handles.__setitem__(event_id, h),
                key=key,
                room=self.room,
            )
        finally:
            self.functions.handles.pop(event_id, None)

    def end_nodes(self) -> set[str]:
        return {n for n, cn in self.engine.flow.nodes.items() if cn.node.type == "end"}

    def function_result(self, effects: list[Effect]) -> CallFunctionResult:
        resp = next((e for e in effects if isinstance(e, ToolResponse)), None)
        rejected = next((e for e in effects if isinstance(e, Rejected)), None)
        moved = any(isinstance(e, SetNode) for e in effects)
        decision = "end" if self.call.flow_state.ended else ("transition" if moved else "stay")
        if resp is None:
            resp = ToolResponse(
                name="",
                error=rejected is not None,
                result={"status": "error", "error": rejected.reason} if rejected else None,
            )
        return CallFunctionResult(
            result=resp.result,
            error=resp.error,
            run_llm=resp.run_llm,
            decision=decision,
            node=self.call.flow_state.node,
            effects=[_public(e) for e in effects],
            state=self.call.flow_state,
            applied_seq=self.inbox.next_seq - 1,
        )

    async def caught_up(self, after_seq: int, settle: bool = False) -> None:
        """Wait until the agent's events up to ``after_seq`` (and, with ``settle``, the
        functions they started) are applied; the agent's outbox may lag its update."""

        def ready() -> bool:
            applied = self.inbox.next_seq > after_seq
            return self.call.flow_state.ended or (
                applied and (not settle or not self.call.flow_state.pending)
            )

        try:
            await workflow.wait_condition(ready, timeout=timedelta(seconds=60))
        except TimeoutError:
            raise ApplicationError(
                f"events up to seq {after_seq} did not arrive within 60 s", type="AgentOutOfSync"
            ) from None
