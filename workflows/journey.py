"""JourneyWorkflow (id ``journey-<flow>-<person key>``): one person's calls of one flow.

A conversation rarely ends in one call. The journey holds what its calls learnt (the flow's
``state`` and extracted values), a one-line summary of each call, and the next call's due
time; each call is a child ``CallWorkflow`` started with the journey's state, the node and
first words the follow-up named and a short context of the earlier calls (``CallInput.journey``,
``callflow/journey.py``). The next call is scheduled by the call before: its end node's
``follow_up``, or a handler's ``flow_manager.state["follow_up"]``; its instant (a delay, a
wall-clock time in the person's timezone, the calling window) is found by an activity
(``activities/journeys.py``) and waited for as a durable timer, so a worker restart or a
deploy changes nothing. Right before each call the journey checks the do-not-call list and
the window again (a number added since ends the journey; a closed window moves the call to
its opening).

An inbound call from the person joins the open journey (``join`` update, sent by the agent
before it attaches, ``workflows/journey_client.py``): the journey starts that call as its
own child, at the flow's ``journey.callback_node``, and cancels the follow-up it made
pointless. With no follow-up due, a journey stays open for callbacks ``open_for_s`` after
its last call, then completes. ``end`` (``ringflow journey cancel``, the do-not-call list)
stops it: a live call is never cut (children are abandoned, not cancelled), no further call
is placed.

History stays bounded: the journey continues as new every ``calls_per_run`` calls (or when
the server suggests it), between calls, carrying the state, the newest summaries and the
follow-up. Its clock is Temporal's, skewed forward in a simulation (``time_scale``): each
wait then lasts ``1/time_scale`` of the journey's time, and the journey's clock jumps by
the rest, so a follow-up "in 2 days at 10:00" is due at 10:00 on the person's wall clock two
days on, across a daylight-saving change, while the test waits seconds.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue, RetryPolicy, WorkflowIDReusePolicy
from temporalio.workflow import ChildWorkflowHandle, ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from ringflow.activities.campaign_rules import RETRY_OUTCOMES, Windows
    from ringflow.activities.journeys import (
        CheckAnswer,
        CheckRequest,
        DueAnswer,
        DueRequest,
        JourneyActivities,
    )
    from ringflow.activities.search_attributes import RINGFLOW_STATUS
    from ringflow.callflow.errors import FlowError, safe_reason
    from ringflow.callflow.journey import (
        MAX_CONTEXT_CHARS,
        FollowUp,
        JourneyContext,
        JourneyStart,
        requested_follow_up,
    )
    from ringflow.contract.dial import Dial
    from ringflow.contract.journey import (
        SUMMARIES_KEPT,
        CallSummary,
        EndRequest,
        FollowUpDue,
        HoldRequest,
        JoinAnswer,
        JoinRequest,
        JourneyCarry,
        JourneyEnd,
        JourneyInput,
        JourneyStatus,
        JourneyView,
    )
    from ringflow.contract.records import CallRecord
    from ringflow.workflows.call import CallWorkflow
    from ringflow.workflows.client import checked_call_input, workflow_id

RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))
NOTES_KEPT = 10


@workflow.defn(name="JourneyWorkflow")
class JourneyWorkflow:
    @workflow.init
    def __init__(self, inp: JourneyInput) -> None:
        self.inp = inp
        c = inp.carry or JourneyCarry()
        self.calls_total = c.calls_total
        self.summaries = list(c.summaries)
        self.state = dict(c.state)
        self.extracted = dict(c.extracted)
        self.follow_up = c.follow_up
        self.open_until = c.open_until
        self.runs = c.runs
        self.notes = list(c.notes)
        self.skew = c.skew_s  # the journey's clock minus Temporal's (a simulation's time skips)
        self.retries = dict(c.retries)
        self.held = c.held  # its campaign is paused (the ``hold`` signal)
        self.placed: FollowUpDue | None = None  # the follow-up the live outbound call is for
        self.handle: ChildWorkflowHandle[Any, Any] | None = None
        self.active: CallSummary | None = None  # the live call, ended_at not set yet
        self.placing = False  # a call being started (a join waits its turn)
        self.end: JourneyEnd | None = None
        self.wake = False
        self.calls_this_run = 0
        self.shown: str | None = None

    # --- the journey's clock ----------------------------------------------------------
    def now(self) -> float:
        return workflow.now().timestamp() + self.skew

    async def sleep_until(self, at: float) -> bool:
        """Wait (a durable timer) until the journey's clock reads ``at``; False when woken
        before (a join, an end, a new follow-up). Scaled: the clock skips the rest."""
        scale = self.inp.time_scale
        left = (at - self.now()) / scale
        if left <= 0:
            return True
        self.wake = False
        began = workflow.now().timestamp()
        try:
            await workflow.wait_condition(lambda: self.wake, timeout=timedelta(seconds=left))
            woke = True
        except TimeoutError:
            woke = False
        if scale != 1:  # a simulation: the clock skips what the wait did not last
            real = workflow.now().timestamp()
            # a timer that fired reads ``at`` (its task may run late: a worker restarting)
            self.skew = at - real if not woke else self.skew + (real - began) * (scale - 1)
        return not woke

    # --- run --------------------------------------------------------------------------
    @workflow.run
    async def run(self, inp: JourneyInput) -> JourneyView:
        if inp.carry is None:
            if inp.clock_origin is not None:
                self.skew = inp.clock_origin - workflow.now().timestamp()
            if inp.first_call:
                self.follow_up = FollowUpDue(
                    due_at=self.now(), node=inp.first_node, say=inp.first_say, asked_by="", why="first call"
                )
            else:
                self.open_until = self.now() + inp.open_for_s
        while self.end is None:
            self.show()
            if self.handle is not None:
                await self.follow_call()
                continue
            if self.calls_this_run >= inp.calls_per_run or workflow.info().is_continue_as_new_suggested():
                await workflow.wait_condition(lambda: not self.placing and workflow.all_handlers_finished())
                if self.handle is None:
                    workflow.continue_as_new(inp.model_copy(update={"carry": self.carry()}))
                continue
            if self.calls_total >= inp.max_calls:
                self.end = "max_calls"
                break
            if self.follow_up is not None:
                await self.due_call(self.follow_up)
                continue
            if self.open_until is not None and self.now() < self.open_until:
                await self.sleep_until(self.open_until)
                continue
            self.end = "completed"
        await workflow.wait_condition(lambda: not self.placing)
        if self.handle is not None:  # ended during a call: the call goes on, and is summed up
            await self.follow_call()
        self.show()
        return self.view()

    async def due_call(self, fu: FollowUpDue) -> None:
        """The follow-up's call, once due and allowed (do-not-call, window)."""
        if not await self.sleep_until(fu.due_at) or self.follow_up is not fu or self.end is not None:
            return
        if self.held:  # its campaign is paused: the call goes when it resumes
            await workflow.wait_condition(
                lambda: not self.held or self.follow_up is not fu or self.end is not None
            )
            return  # due now, or changed meanwhile: the run loop decides again
        answer: CheckAnswer = await workflow.execute_activity_method(
            JourneyActivities.journey_check,
            CheckRequest(
                phone=self.inp.phone,
                now=self.now(),
                timezone=self.inp.timezone,
                windows=self.inp.windows,
                rules=self.rules(),
                trunk=self.inp.trunk_id if self.paced() else None,
                cps=self.inp.pace_cps if self.paced() else None,
            ),
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RETRY,
        )
        if self.follow_up is not fu or self.handle is not None or self.end is not None or self.held:
            return  # a callback joined, the journey ended or its campaign paused, while it asked
        if answer.verdict == "dnc":
            self.end = "dnc"
        elif answer.verdict == "no_window":
            self.note(f"no calling window: {answer.problem or 'none opens within three weeks'}")
            self.end = "no_window"
        elif answer.verdict == "later" and answer.at is not None:
            self.follow_up = fu.model_copy(update={"due_at": answer.at})
        else:
            self.follow_up = None
            self.placed = fu
            await self.place(fu, answer.slot)

    # --- calls ------------------------------------------------------------------------
    def context_text(self) -> str:
        """The earlier calls, newest last, within ``MAX_CONTEXT_CHARS``."""
        lines = [s.summary for s in self.summaries]
        while lines and sum(len(x) + 3 for x in lines) > MAX_CONTEXT_CHARS:
            lines.pop(0)
        return "\n".join(f"- {x}" for x in lines)[:MAX_CONTEXT_CHARS]

    def call_id(self, n: int) -> str:
        """``<flow>-<person key>-<run chain>-<n>``: unique across journeys of the same
        person (a journey started again after one ended), no phone number in it."""
        base = workflow.info().workflow_id.removeprefix("journey-")
        return f"{base}-{workflow.info().first_execution_run_id[-8:]}-{n}"

    def start_of(self, n: int, node: str | None, say: str | None) -> JourneyStart:
        ctx = JourneyContext(
            journey_id=workflow.info().workflow_id, call=n, context=self.context_text(), say=say
        )
        return JourneyStart(context=ctx, node=node, state=self.state, extracted=self.extracted)

    def paced(self) -> bool:
        """A campaign's journey takes a slot on the trunk for each call but its first, which
        is the campaign's attempt and has the campaign's slot."""
        first = self.calls_total == 0 and self.inp.first_not_before is not None
        return self.inp.pace_cps is not None and not first

    def rules(self) -> Windows | None:
        """A campaign's journey keeps to the campaign's windows."""
        w = self.inp.campaign_windows
        return Windows.model_validate(w) if w is not None else None

    async def place(self, fu: FollowUpDue, slot: float | None = None) -> None:
        """``slot``: the trunk's (a campaign's journey); its first call has the campaign's."""
        n = self.calls_total + 1
        call_id = self.call_id(n)
        if n == 1 and self.inp.first_not_before is not None:
            slot = self.inp.first_not_before
        dial = Dial(
            to=self.inp.phone,
            from_number=self.inp.from_number,
            trunk_id=self.inp.trunk_id,
            ringing_timeout_s=self.inp.ringing_timeout_s,
            not_before=slot,
        )
        fields = {
            "dial": dial,
            "campaign_id": self.inp.campaign_id,
            "agent_timeout_s": self.inp.agent_timeout_s,
            "journey": self.start_of(n, fu.node, fu.say),
        }
        await self.start_child(n, call_id, "outbound", fields)

    async def start_child(self, n: int, call_id: str, direction: str, fields: dict[str, Any]) -> str | None:
        """Start the journey's call ``n``; None when started, else why not (recorded)."""
        call_inp: Any
        if self.inp.flow_ref is not None:  # the call names the published version, as the journey does
            fields = {**fields, "flow_ref": self.inp.flow_ref}
        if self.inp.canary is not None:
            fields = {**fields, "canary": self.inp.canary}
        try:
            call_inp, attrs = checked_call_input(self.inp.flow, call_id, self.inp.variables, fields)
        except FlowError as exc:
            self.note(f"call {n} could not start: {safe_reason(exc)}")
            self.end = self.end or "completed"
            return safe_reason(exc)
        self.placing = True
        try:
            self.handle = await workflow.start_child_workflow(
                CallWorkflow.run,
                call_inp,
                id=workflow_id(call_id),
                search_attributes=attrs,
                parent_close_policy=ParentClosePolicy.ABANDON,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                static_summary=f"{self.inp.flow.flow.flow} journey call {n}",
            )
        except Exception as exc:
            if isinstance(exc, asyncio.CancelledError):
                raise
            self.note(f"call {n} could not start: {type(exc).__name__}")
            return type(exc).__name__
        finally:
            self.placing = False
        self.active = CallSummary(n=n, call_id=call_id, direction=direction, started_at=self.now())
        self.calls_total = n
        self.calls_this_run += 1
        self.open_until = None
        self.wake = True
        return None

    async def follow_call(self) -> None:
        handle, active = self.handle, self.active
        assert handle is not None and active is not None
        self.show()
        rec: CallRecord | None
        try:
            rec = await handle
        except Exception as exc:
            if isinstance(exc, asyncio.CancelledError):
                raise
            rec = None
        self.handle, self.active = None, None
        placed, self.placed = self.placed, None
        summary = self.summed_up(active, rec)
        self.summaries = [*self.summaries, summary][-SUMMARIES_KEPT:]
        self.open_until = self.now() + self.inp.open_for_s
        if rec is None:
            return
        outcome = rec.end_reason or "error"
        if outcome in RETRY_OUTCOMES and active.direction == "outbound":
            if self.end is None and placed is not None:
                await self.retry(placed, outcome, rec.call_id)
            return
        self.retries = {}  # reached: a later miss starts its count again
        asked = rec.state.get("follow_up") if isinstance(rec.state, dict) else None
        self.state = {k: v for k, v in rec.state.items() if k != "follow_up"}
        self.extracted = {**self.extracted, **rec.extracted}
        if self.end is None:
            await self.schedule(rec, asked)

    def summed_up(self, active: CallSummary, rec: CallRecord | None) -> CallSummary:
        if rec is None:
            return active.model_copy(
                update={"ended_at": self.now(), "end_reason": "error", "summary": f"call {active.n}: failed"}
            )
        learnt = ", ".join(f"{k}={str(v)[:40]}" for k, v in list(rec.extracted.items())[:6])
        line = (
            f"call {active.n} ({active.direction}): ended {rec.end_reason or 'unknown'} at {rec.node or '-'}"
            + (f", disposition {rec.disposition}" if rec.disposition else "")
            + (f"; learnt {learnt}" if learnt else "")
        )
        return active.model_copy(
            update={
                "ended_at": self.now(),
                "end_reason": rec.end_reason,
                "disposition": rec.disposition,
                "node": rec.node,
                "summary": line[:400],
            }
        )

    async def retry(self, placed: FollowUpDue, outcome: str, call_id: str) -> None:
        """The call did not reach the person: the same call again, by the journey's rule."""
        rule = self.inp.retry.get(outcome)
        used = self.retries.get(outcome, 0)
        if rule is None or used >= rule.count:
            return
        self.retries = {**self.retries, outcome: used + 1}
        again = FollowUp(after=f"{rule.delay_s:.3f}s", node=placed.node, say=placed.say)
        await self.schedule_follow_up(again, call_id, f"retry {used + 1} after {outcome}")

    async def schedule(self, rec: CallRecord, asked: Any) -> None:
        """The follow-up the call asked for: a handler's (``state.follow_up``) first, else
        its end node's, when it ended there."""
        fu: FollowUp | None = None
        why = ""
        got = requested_follow_up(asked)
        if isinstance(got, str):
            self.note(f"call {rec.call_id}: {got}")
        elif got is not None:
            fu, why = got, "state.follow_up"
        nodes = self.inp.flow.flow.nodes
        if fu is None and rec.end_reason == "completed" and rec.node in nodes:
            fu, why = nodes[rec.node].follow_up, f"end node {rec.node}"
        if fu is None:
            return
        if fu.node is not None and fu.node not in nodes:
            self.note(f"call {rec.call_id}: the follow-up's node '{fu.node[:64]}' is not in the flow")
            return
        await self.schedule_follow_up(fu, rec.call_id, why)

    async def schedule_follow_up(self, fu: FollowUp, call_id: str, why: str) -> None:
        """The follow-up's instant (person's clock, window), then its timer (the run loop)."""
        due: DueAnswer = await workflow.execute_activity_method(
            JourneyActivities.journey_due,
            DueRequest(
                now=self.now(),
                follow_up=fu,
                timezone=self.inp.timezone,
                windows=self.inp.windows,
                rules=self.rules(),
            ),
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RETRY,
        )
        if due.due_at is None:
            self.note(f"call {call_id}: no follow-up: {due.problem or 'no calling window opens for it'}")
            return
        self.follow_up = FollowUpDue(due_at=due.due_at, node=fu.node, say=fu.say, asked_by=call_id, why=why)

    # --- messages ---------------------------------------------------------------------
    # Payloads arrive raw and are decoded here: a malformed one is refused and noted, never
    # a failed workflow task.
    def decode(self, raw: RawValue, model: Any) -> Any:
        try:
            return workflow.payload_converter().from_payload(raw.payload, model)
        except Exception as exc:
            if isinstance(exc, asyncio.CancelledError):
                raise
            return None

    @workflow.update
    async def join(self, raw: RawValue) -> JoinAnswer:
        req: JoinRequest | None = self.decode(raw, JoinRequest)
        if req is None:
            self.note("a join that is not a JoinRequest was refused")
            return JoinAnswer(joined=False, call_id="", reason="not a JoinRequest")
        if self.end is not None or self.handle is not None or self.placing:
            why = "the journey has ended" if self.end is not None else "a call of the journey is live"
            return JoinAnswer(joined=False, call_id=req.call_id, reason=why)
        spec = self.inp.flow.flow.journey
        node = spec.callback_node if spec is not None else None
        cancelled = self.follow_up is not None
        n = self.calls_total + 1
        fields = {
            "direction": "inbound",
            "room": req.room,
            "caller_number": req.caller_number,
            "called_number": req.called_number,
            "agent_timeout_s": req.agent_timeout_s,
            "campaign_id": self.inp.campaign_id,
            "journey": self.start_of(n, node, None),
        }
        problem = await self.start_child(n, req.call_id, "inbound", fields)
        if problem is not None:
            return JoinAnswer(joined=False, call_id=req.call_id, reason=problem)
        if cancelled:  # the callback is the conversation the follow-up was for
            self.note(f"call {n} (a callback) cancelled the follow-up due at {self.follow_up_at()}")
            self.follow_up = None
        return JoinAnswer(joined=True, call_id=req.call_id, node=node, cancelled_follow_up=cancelled)

    @join.validator
    def validate_join(self, raw: RawValue) -> None:
        """Refused before it is recorded: a journey that has ended takes no call."""
        if self.end is not None:
            raise ValueError("the journey has ended")

    @workflow.signal(name="end")
    def end_journey(self, raw: RawValue) -> None:
        req: EndRequest | None = self.decode(raw, EndRequest)
        if req is None:
            self.note("an end that is not an EndRequest was refused")
            return
        if self.end is None:
            self.end = req.reason
            self.follow_up = None
            self.wake = True

    @workflow.signal(name="hold")
    def hold(self, raw: RawValue) -> None:
        """Its campaign paused (or resumed): no call while held."""
        req: HoldRequest | None = self.decode(raw, HoldRequest)
        if req is None:
            self.note("a hold that is not a HoldRequest was refused")
            return
        if req.held != self.held:
            self.held = req.held
            self.note("held: its campaign is paused" if req.held else "resumed with its campaign")

    @workflow.query(name="state")
    def state_query(self, *_: Any) -> JourneyView:
        return self.view()

    # --- what ops see -----------------------------------------------------------------
    def follow_up_at(self) -> str:
        return f"{self.follow_up.due_at:.0f}" if self.follow_up is not None else "-"

    def note(self, text: str) -> None:
        self.notes = [*self.notes, text[:300]][-NOTES_KEPT:]
        workflow.logger.info("journey: %s", text[:300])

    def status(self) -> JourneyStatus:
        if self.end is not None and self.handle is None:
            return "ended"
        if self.handle is not None or self.placing:
            return "calling"
        return "scheduled" if self.follow_up is not None else "open"

    def show(self) -> None:
        """The status search attribute (one upsert per change) and the current details."""
        status = self.status()
        workflow.set_current_details(
            f"**{status}** · {self.calls_total} calls"
            + (f" · next call at {self.follow_up_at()}" if self.follow_up is not None else "")
        )
        if status != self.shown:
            workflow.upsert_search_attributes([RINGFLOW_STATUS.value_set(status)])
            self.shown = status

    def view(self) -> JourneyView:
        return JourneyView(
            journey_id=workflow.info().workflow_id,
            flow=self.inp.flow.flow.flow,
            status=self.status(),
            end=self.end,
            calls_total=self.calls_total,
            calls=self.summaries,
            active_call=self.active.call_id if self.active is not None else None,
            follow_up=self.follow_up,
            open_until=self.open_until,
            state=self.state,
            extracted=self.extracted,
            runs=self.runs,
            notes=self.notes,
            now=self.now(),
            held=self.held,
        )

    def carry(self) -> JourneyCarry:
        return JourneyCarry(
            calls_total=self.calls_total,
            summaries=self.summaries,
            state=self.state,
            extracted=self.extracted,
            follow_up=self.follow_up,
            open_until=self.open_until,
            runs=self.runs + 1,
            notes=self.notes,
            skew_s=self.skew,
            retries=self.retries,
            held=self.held,
        )
