"""CampaignWorkflow (id ``campaign-<id>``): many outbound calls, paced, in windows, retried.

It holds no contacts: each round it claims the next due ones from the database (an
activity that also applies the calling windows, the do-not-call list and ``max_attempts``),
paces each attempt on the trunk's shared limiter, checks the do-not-call list and the
window once more right before the dial, and starts the call as a child ``CallWorkflow``
exactly as ``ringflow call dial`` does (``workflows.client._prepare``: same input, same
search attributes, plus ``RingflowCampaign``). A child outlives a cancelled campaign
(``ParentClosePolicy.ABANDON``): cancelling stops new dials and never cuts a live call.

The call id is ``<campaign>-<contact>-<attempt>``, written in the attempt row before the
dial: Temporal starts a child id once, so no attempt is ever dialed twice, whatever
restarts. History stays bounded: past ``max_history_events`` the campaign continues as
new, carrying the calls still live (followed by an activity in the next run).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import RetryPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from activities.campaign_acts import (
        ClaimRequest,
        FinishedRequest,
        OutcomeRequest,
        OutcomeResult,
        PaceRequest,
        PredialRequest,
    )
    from activities.campaign_store import Claimed, ClaimResult, Outcome
    from activities.records import CallRecord
    from activities.search_attributes import RINGFLOW_CAMPAIGN, RINGFLOW_FLOW, RINGFLOW_STATUS
    from activities.telephony import Dial
    from callflow.errors import FlowError
    from workflows.call import CallWorkflow
    from workflows.campaign_messages import CampaignCarry, CampaignInput, Limits, LimitsChange, LiveCall
    from workflows.client import _prepare, workflow_id

_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))
_SHORT = timedelta(seconds=60)


def campaign_workflow_id(campaign_id: str) -> str:
    return f"campaign-{campaign_id}"


@workflow.defn(name="CampaignWorkflow")
class CampaignWorkflow:
    @workflow.init
    def __init__(self, inp: CampaignInput) -> None:
        self.inp = inp
        c = inp.carry or CampaignCarry(limits=inp.limits)
        self.limits: Limits = c.limits
        self.claims = c.claims
        self.carried = list(c.live)
        self.live: dict[str, LiveCall] = {lc.call_id: lc for lc in c.live}
        self.stats: dict[str, int] = dict(c.stats)
        self.recent: list[float] = list(c.recent)
        self.paused = c.paused
        self.pause_reason = c.pause_reason
        self.cancelled = c.cancelled
        self.runs = c.runs
        self.events_before = c.events_before
        self.starting = 0  # claimed attempts not yet dialed (pacing, last checks)
        self.next_due: float | None = None
        self.exhausted = False
        self.wake = False
        self.shown: str | None = None

    @workflow.run
    async def run(self, inp: CampaignInput) -> dict[str, Any]:
        for lc in self.carried:
            self.spawn(self.follow(lc))
        self.show()
        while not self.cancelled:
            if self.paused:
                self.show()
                await workflow.wait_condition(lambda: not self.paused or self.cancelled)
                continue
            if self.should_continue_as_new():
                await workflow.wait_condition(lambda: self.starting == 0)
                workflow.continue_as_new(self.carry())
            now = workflow.now().timestamp()
            free = self.limits.max_concurrent - len(self.live) - self.starting
            if free > 0 and (self.next_due is None or self.next_due <= now):
                res = await self.claim(free)
                for c in res.claimed:
                    self.starting += 1
                    self.spawn(self.attempt(c))
                if res.claimed:
                    continue
                if res.next_due is None and not self.live and not self.starting:
                    break  # every contact is closed: the campaign is done
            self.show()
            timeout = None
            if self.next_due is not None and free > 0:
                timeout = timedelta(seconds=max(0.05, self.next_due - workflow.now().timestamp()))
            self.wake = False
            try:
                await workflow.wait_condition(
                    lambda: self.wake or self.cancelled or self.paused, timeout=timeout
                )
            except TimeoutError:
                pass
        self.show("cancelling" if self.cancelled else "finishing")
        await workflow.wait_condition(lambda: not self.live and not self.starting)
        status = "cancelled" if self.cancelled else "finished"
        counts = await workflow.execute_activity(
            "campaign_counts",
            inp.campaign_id,
            result_type=dict,
            start_to_close_timeout=_SHORT,
            retry_policy=_RETRY,
        )
        self.show(status)
        try:
            await workflow.execute_activity(
                "campaign_finished",
                FinishedRequest(
                    campaign_id=inp.campaign_id, flow=self.flow(), status=status, stats=self.stats
                ),
                result_type=str,
                start_to_close_timeout=_SHORT,
                retry_policy=RetryPolicy(maximum_interval=timedelta(minutes=5), maximum_attempts=20),
            )
        except Exception as exc:
            workflow.logger.warning("campaign webhook not delivered: %s", str(exc)[:200])
        return {"campaign_id": inp.campaign_id, "status": status, "stats": self.stats, **counts}

    # --- one attempt --------------------------------------------------------------------
    async def claim(self, limit: int) -> ClaimResult:
        key = f"claim-{self.claims}"
        self.claims += 1
        res: ClaimResult = await workflow.execute_activity(
            "campaign_claim",
            ClaimRequest(
                campaign_id=self.inp.campaign_id,
                claim_key=key,
                limit=limit,
                windows=self.inp.windows,
                max_attempts=self.limits.max_attempts,
            ),
            result_type=ClaimResult,
            start_to_close_timeout=_SHORT,
            retry_policy=_RETRY,
        )
        self.next_due = res.next_due
        self.count("out_of_window_deferred", res.out_of_window)
        return res

    async def attempt(self, c: Claimed) -> None:
        req = PredialRequest(
            campaign_id=self.inp.campaign_id, idx=c.idx, attempt=c.attempt, windows=self.inp.windows
        )
        try:
            if self.paused or self.cancelled:
                verdict = "held"
            else:
                try:
                    verdict = await workflow.execute_activity(
                        "campaign_pace",
                        PaceRequest(**req.model_dump(), trunk=self.inp.trunk_id, cps=self.limits.cps),
                        result_type=str,
                        start_to_close_timeout=timedelta(hours=2),
                        heartbeat_timeout=timedelta(seconds=30),
                        retry_policy=_RETRY,
                    )
                except Exception as exc:
                    self.hold(f"pacing failed: {str(getattr(exc, 'cause', None) or exc)[:300]}")
                    verdict = "held"
            if verdict == "go" and (self.paused or self.cancelled):
                verdict = "held"  # paused while this attempt waited for its slot: not dialed
            if verdict == "held":
                await workflow.execute_activity(
                    "campaign_release", req, start_to_close_timeout=_SHORT, retry_policy=_RETRY
                )
                return
            if verdict != "go":
                self.count(f"not_dialed_{verdict}")
                return
            handle = await self.start_child(c)
            if handle is None:
                return
        finally:
            self.starting -= 1
            self.wake = True
        try:
            rec: CallRecord = await handle
            outcome = Outcome(
                end_reason=rec.end_reason or "error", disposition=rec.disposition, extracted=rec.extracted
            )
        except Exception as exc:
            if isinstance(exc, asyncio.CancelledError):
                raise
            outcome = Outcome(end_reason="error", disposition=None)
        await self.record(LiveCall(idx=c.idx, attempt=c.attempt, call_id=c.call_id), outcome)

    async def start_child(self, c: Claimed) -> Any:
        inp = self.inp
        dial = Dial(
            to=c.phone,
            from_number=inp.from_number,
            trunk_id=inp.trunk_id,
            ringing_timeout_s=inp.ringing_timeout_s,
        )
        try:
            call_inp, attrs = _prepare(
                inp.definition,
                c.call_id,
                c.variables,
                {"dial": dial, "campaign_id": inp.campaign_id, "agent_timeout_s": inp.agent_timeout_s},
            )
        except FlowError as exc:  # a contact's variables the flow refuses: that contact fails
            await self.record(
                LiveCall(idx=c.idx, attempt=c.attempt, call_id=c.call_id),
                Outcome(end_reason="invalid_contact", disposition=str(exc)[:200]),
            )
            return None
        self.live[c.call_id] = LiveCall(idx=c.idx, attempt=c.attempt, call_id=c.call_id)
        self.count("dialed")
        now = workflow.now().timestamp()
        self.recent = [t for t in self.recent if t > now - 60.0] + [now]
        try:
            # CallWorkflow.run takes a RawValue (a malformed input fails the workflow, not its
            # task); what is sent is a CallInput, which mypy cannot match against RawValue.
            return await workflow.start_child_workflow(  # type: ignore[misc]
                CallWorkflow.run,
                call_inp,
                id=workflow_id(c.call_id),
                search_attributes=attrs,
                parent_close_policy=ParentClosePolicy.ABANDON,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                static_summary=f"{inp.definition.flow.flow} campaign {inp.campaign_id} call",
            )
        except WorkflowAlreadyStartedError:  # this attempt's call exists: follow it, never dial again
            self.spawn(self.follow(self.live[c.call_id]))
            return None

    async def follow(self, lc: LiveCall) -> None:
        """A call an earlier run started: wait for its end through an activity."""
        outcome = await workflow.execute_activity(
            "campaign_await_call",
            lc.call_id,
            result_type=Outcome,
            start_to_close_timeout=timedelta(days=1),
            heartbeat_timeout=timedelta(seconds=60),
            retry_policy=_RETRY,
        )
        await self.record(lc, outcome)

    async def record(self, lc: LiveCall, outcome: Outcome) -> None:
        res: OutcomeResult = await workflow.execute_activity(
            "campaign_outcome",
            OutcomeRequest(
                campaign_id=self.inp.campaign_id,
                idx=lc.idx,
                attempt=lc.attempt,
                outcome=outcome,
                retry=self.inp.retry,
                max_attempts=self.limits.max_attempts,
                time_scale=self.inp.time_scale,
            ),
            result_type=OutcomeResult,
            start_to_close_timeout=_SHORT,
            retry_policy=_RETRY,
        )
        self.count(f"outcome_{outcome.end_reason}")
        self.count(f"contact_{res.state}")
        if res.next_at is not None:
            self.next_due = res.next_at if self.next_due is None else min(self.next_due, res.next_at)
        self.live.pop(lc.call_id, None)
        self.wake = True

    # --- control ------------------------------------------------------------------------
    @workflow.update
    def pause(self, reason: str | None = None) -> str:
        self.hold(reason or "paused by an operator")
        return self.status()

    def hold(self, reason: str) -> None:
        """Pause as an operator would; the workflow pauses itself this way when pacing fails
        (an update method is not meant to be called as a plain one)."""
        if not self.cancelled:
            self.paused = True
            self.pause_reason = reason[:300]
            self.show()

    @workflow.update
    def resume(self) -> str:
        self.paused, self.pause_reason = False, None
        self.wake = True
        self.show()
        return self.status()

    @workflow.update
    def cancel(self) -> str:
        """No new dials; the calls live now finish as they would."""
        self.cancelled = True
        self.wake = True
        self.show()
        return self.status()

    # Taken as plain JSON and checked here, so a bad value is refused saying which and why
    # (the SDK's own decoding would only say it failed).
    @workflow.update
    def set_limits(self, change: Any) -> Limits:
        checked = LimitsChange.model_validate(change)
        self.limits = self.limits.model_copy(update=checked.model_dump(exclude_none=True))
        self.wake = True
        return self.limits

    @set_limits.validator
    def validate_set_limits(self, change: Any) -> None:
        if not isinstance(change, dict):
            raise ValueError("set_limits takes an object: {max_concurrent, cps, max_attempts}")
        try:
            LimitsChange.model_validate(change)
        except ValidationError as exc:
            raise ValueError(
                "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors())
            ) from None

    @workflow.query
    def progress(self, *_: Any) -> dict[str, Any]:
        now = workflow.now().timestamp()
        last_minute = sum(1 for t in self.recent if t > now - 60.0)
        return {
            "campaign_id": self.inp.campaign_id,
            "status": self.status(),
            "flow": self.flow(),
            "pause_reason": self.pause_reason,
            "live": len(self.live),
            "starting": self.starting,
            "attempts_last_minute": last_minute,
            "attempts_per_second": round(last_minute / 60.0, 3),
            "next_due": self.next_due,
            "limits": self.limits.model_dump(),
            "stats": self.stats,
            "runs": self.runs,
            "history_events": self.events_before + workflow.info().get_current_history_length(),
        }

    # --- helpers ------------------------------------------------------------------------
    def status(self) -> str:
        if self.cancelled:
            return "cancelling" if (self.live or self.starting) else "cancelled"
        return "paused" if self.paused else "running"

    def flow(self) -> str:
        return self.inp.definition.flow.flow

    def count(self, name: str, n: int = 1) -> None:
        if n:
            self.stats[name] = self.stats.get(name, 0) + n

    def show(self, status: str | None = None) -> None:
        """Search attributes (campaign, status, flow) only when the status changed: each is an event."""
        status = status or self.status()
        if status == self.shown:
            return
        workflow.upsert_search_attributes(
            [
                RINGFLOW_CAMPAIGN.value_set(self.inp.campaign_id),
                RINGFLOW_STATUS.value_set(status),
                RINGFLOW_FLOW.value_set(self.flow()),
            ]
        )
        self.shown = status

    def spawn(self, coro: Any) -> None:
        task = asyncio.get_event_loop().create_task(coro)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            if isinstance(exc, ApplicationError | workflow.NondeterminismError):
                raise exc
            workflow.logger.error("campaign task failed: %s", str(exc)[:300])

    def should_continue_as_new(self) -> bool:
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() > self.inp.max_history_events
        )

    def carry(self) -> CampaignInput:
        carry = CampaignCarry(
            claims=self.claims,
            live=list(self.live.values()),
            stats=self.stats,
            recent=self.recent,
            paused=self.paused,
            pause_reason=self.pause_reason,
            cancelled=self.cancelled,
            limits=self.limits,
            runs=self.runs + 1,
            events_before=self.events_before + workflow.info().get_current_history_length(),
        )
        return self.inp.model_copy(update={"carry": carry})
