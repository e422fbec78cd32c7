"""CampaignWorkflow (id ``campaign-<id>``): many outbound calls, paced, in windows, retried.

It holds no contacts: they are rows in the database. The workflow works in rounds: one
activity (``campaign_round``) records the calls that ended since the last round, claims the
next batch of due contacts (applying the calling windows, the do-not-call list and
``max_attempts``), paces each attempt on the trunk's shared limiter and checks the
do-not-call list and the window once more right at its slot; the workflow then starts the
batch's calls as child ``CallWorkflow``s, each exactly as ``ringflow call dial`` starts a
call (:func:`workflows.client.checked_call_input`: same input and search attributes, plus
``RingflowCampaign``). Up to three rounds are in flight, each reserving the slots
right after the one before, so the pace has no gaps; a round holds about a second of the pace
(``cps`` attempts), which is what keeps the history short: the events per attempt are
mostly the child's own (started, completed) and the workflow tasks they cause. Since
``campaign-slots-v1`` a round comes back ``LEAD_S`` before its first slot (its last checks
made then, for the slot's time) and each call carries its slot (``Dial.not_before``): the
call starts ahead, its room and agent get ready, and its dial waits for the slot. So the
dials keep the pace whatever the workflow's own latency shorter than the lead (a round's
calls no longer start together at its last slot, and a continue-as-new leaves no gap); a
pause or cancel stops the calls not started yet, the ones started (their slot within
about ``LEAD_S``) still dial. A retry's
due time is a guess the workflow makes from the rules (no timer per contact, no activity
per outcome); the round that runs then records it and claims what is due.

A child outlives a cancelled campaign (``ParentClosePolicy.ABANDON``): cancelling stops new
dials and never cuts a live call. The call id is ``<campaign>-<contact>-<attempt>``,
written in the attempt row before the dial: Temporal starts a child id once, so no attempt
is ever dialed twice, whatever restarts. Past ``max_history_events`` the campaign continues
as new, carrying the live calls (followed together by one activity in the next run) and the
outcomes not recorded yet. Campaigns started before rounds existed finish on the loop they
started with (``workflows/campaign_legacy.py``, no ``campaign-rounds-v1`` marker).
"""

from __future__ import annotations

import asyncio
import math
from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.exceptions import WorkflowAlreadyStartedError

from ringflow.workflows.campaign_base import RETRY
from ringflow.workflows.campaign_legacy import LegacyLoop

with workflow.unsafe.imports_passed_through():
    from ringflow.activities.campaign_acts import (
        Attempt,
        CampaignActivities,
        Ended,
        RoundRequest,
        RoundResult,
    )
    from ringflow.activities.campaign_store import Claimed, Outcome, classify
    from ringflow.callflow.errors import FlowError
    from ringflow.workflows.campaign_messages import CampaignInput, Limits, LimitsChange, LiveCall

ROUNDS_PATCH = "campaign-rounds-v1"
HANDOVER_PATCH = "campaign-handover-v1"
SLOTS_PATCH = "campaign-slots-v1"
LEAD_S = 3.0  # calls start this long before their slot, and their dial waits for it (slots)
LOOKAHEAD = 3  # rounds in flight at most (a slow workflow task between rounds leaves no gap)
ROUND_S = 1.0  # a round claims about this many seconds of the pace
MAX_BATCH = 100


def campaign_workflow_id(campaign_id: str) -> str:
    return f"campaign-{campaign_id}"


def _earliest(*times: float | None) -> float | None:
    known = [t for t in times if t is not None]
    return min(known) if known else None


@workflow.defn(name="CampaignWorkflow")
class CampaignWorkflow(LegacyLoop):
    @workflow.init
    def __init__(self, inp: CampaignInput) -> None:
        super().__init__(inp)
        self.returned = 0  # rounds returned so far (this run)
        self.in_flight: list[int] = []  # each round in flight: ``returned`` when it began
        self.retry_log: list[tuple[int, float]] = []  # (round number, earliest retry it set)
        self.timer_at: float | None = None
        self.handover = False  # continuing as new: a round's calls go to the next run
        self.slotted = False  # campaign-slots-v1: each call's dial waits for its slot

    @workflow.run
    async def run(self, inp: CampaignInput) -> dict[str, Any]:
        if not workflow.patched(ROUNDS_PATCH):
            return await self.run_legacy(inp)
        # Rounds come back LEAD_S before their first slot and each call's dial waits for its
        # slot (Dial.not_before): the dials keep the pace across the workflow's own pauses
        # (a round's task, a continue-as-new) shorter than the lead. Before: a round came back
        # at its last slot and its calls started together, late by the workflow's latency.
        self.slotted = workflow.patched(SLOTS_PATCH)
        if self.carried:
            self.spawn(self.follow_all(self.carried))
        for c in self.to_start:  # passed their checks in the last run: dial them first
            self.starting += 1
            self.spawn(self.call(c, again=True))
        self.to_start = []
        self.next_due = 0.0  # unknown: ask the database at once
        self.show()
        while not self.cancelled:
            if self.paused:
                self.show()
                if (self.pending or self.release) and self.idle():
                    self.begin_round(0)  # record what ended, give back what was not dialed
                self.wake = False
                await workflow.wait_condition(lambda: not self.paused or self.cancelled or self.wake)
                continue
            if self.should_continue_as_new():
                if workflow.patched(HANDOVER_PATCH):
                    # Not waiting for the calls' starts to be confirmed (seconds on a loaded
                    # server, with no dials meanwhile): the next run starts those again, under
                    # the same id, so each still starts once (a child whose parent run closed
                    # before the server started it is not started).
                    self.handover = True
                    await workflow.wait_condition(lambda: not self.rounds)
                else:
                    await workflow.wait_condition(lambda: not self.rounds and not self.starting)
                workflow.continue_as_new(self.carry())
            free = self.limits.max_concurrent - len(self.live) - self.starting
            due = self.next_due is not None and self.next_due <= workflow.now().timestamp()
            if self.rounds < LOOKAHEAD and (
                (free > 0 and due) or (self.idle() and (self.pending or self.release))
            ):
                self.begin_round(min(free, self.batch()) if due else 0)
                continue
            if self.idle() and self.next_due is None:
                break  # every contact is closed: the campaign is done
            self.show()
            self.arm(free)
            self.wake = False
            await workflow.wait_condition(lambda: self.wake or self.cancelled or self.paused)
        self.show("cancelling" if self.cancelled else "finishing")
        await workflow.wait_condition(lambda: not self.live and not self.starting and not self.rounds)
        if self.pending or self.release:
            self.begin_round(0)
            await workflow.wait_condition(lambda: not self.rounds)
        return await self.finish("cancelled" if self.cancelled else "finished")

    def idle(self) -> bool:
        return not self.live and not self.starting and not self.rounds

    def batch(self) -> int:
        return max(1, min(MAX_BATCH, math.ceil(self.limits.cps * ROUND_S)))

    # --- rounds -------------------------------------------------------------------------
    def begin_round(self, limit: int) -> None:
        """Counted at once (rounds, attempts starting), so the loop sees them before the
        round's task runs."""
        self.rounds += 1
        self.starting += limit
        self.in_flight.append(self.returned)
        ended, self.pending = self.pending, []
        release, self.release = self.release, []
        key = f"claim-{self.claims}"
        self.claims += 1
        self.spawn(self.round(limit, key, ended, release, self.returned))

    async def round(
        self, limit: int, key: str, ended: list[Ended], release: list[Attempt], since: int
    ) -> None:
        req = RoundRequest(
            campaign_id=self.inp.campaign_id,
            claim_key=key,
            limit=limit,
            windows=self.inp.windows,
            max_attempts=self.limits.max_attempts,
            trunk=self.inp.trunk_id,
            cps=self.limits.cps,
            ended=ended,
            release=release,
            retry=self.inp.retry,
            time_scale=self.inp.time_scale,
            lead_s=LEAD_S if self.slotted else None,
        )
        try:
            res: RoundResult = await workflow.execute_activity_method(
                CampaignActivities.campaign_round,
                req,
                start_to_close_timeout=timedelta(hours=2),
                heartbeat_timeout=timedelta(seconds=30),
                retry_policy=RETRY,
            )
        except Exception as exc:  # no pacing (no Redis): pause, keep what the round carried
            self.pending = ended + self.pending
            self.release = release + self.release
            self.hold(f"pacing failed: {str(getattr(exc, 'cause', None) or exc)[:300]}")
            res = RoundResult(ready=[], next_due=self.next_due)
        self.returned += 1
        self.in_flight.remove(since)
        # A round that returned while this one was out may have recorded its outcomes after
        # this one read the next due time: take their retries into account.
        later = [t for n, t in self.retry_log if n > since]
        if res.retry_at is not None:
            self.retry_log.append((self.returned, res.retry_at))
        oldest = min(self.in_flight, default=self.returned)
        self.retry_log = [(n, t) for n, t in self.retry_log if n > oldest]
        self.next_due = _earliest(res.next_due, *later, *(e.retry_at for e in self.pending))
        self.count("out_of_window_deferred", res.out_of_window)
        for state, n in res.states.items():
            self.count(f"contact_{state}", n)
        for why, n in res.skipped.items():
            self.count(f"not_dialed_{why}", n)
        self.starting -= limit - len(res.ready)
        self.rounds -= 1
        for c in res.ready:
            if self.paused or self.cancelled:  # paused while the round waited: not dialed
                self.release.append(Attempt(idx=c.idx, attempt=c.attempt))
                self.starting -= 1
            elif self.handover and not self.slotted:
                # Slotted, they start now, for their slot: the ones not confirmed at the
                # continue-as-new are started again by the next run (``carry``).
                self.to_start.append(c)
                self.starting -= 1
            else:
                self.spawn(self.call(c))
        self.wake = True

    async def call(self, c: Claimed, again: bool = False) -> None:
        lc = LiveCall(idx=c.idx, attempt=c.attempt, call_id=c.call_id)
        try:
            try:
                call_inp, attrs = self.call_input(c)
            except FlowError as exc:  # a contact's variables the flow refuses: that contact fails
                self.ended(lc, Outcome(end_reason="invalid_contact", disposition=str(exc)[:200]))
                return
            self.unconfirmed[c.call_id] = c
            try:
                handle = await self.start_call(c, call_inp, attrs, again)
            except WorkflowAlreadyStartedError:  # this attempt's call exists: follow it, never dial again
                self.spawn(self.follow_all([lc]))
                return
        finally:
            self.unconfirmed.pop(c.call_id, None)
            self.starting -= 1
            self.wake = True
        outcome = await self.outcome_of(handle)
        self.ended(lc, outcome)

    def ended(self, lc: LiveCall, outcome: Outcome) -> None:
        """Kept for the next round to record; a retryable outcome makes a round due when its
        retry could be (the round learns the real time from the database)."""
        self.count(f"outcome_{outcome.end_reason}")
        rule = self.inp.retry.get(classify(outcome.end_reason))
        at = None
        if rule is not None and rule.count > 0:
            at = workflow.now().timestamp() + rule.delay_s / self.inp.time_scale
            self.next_due = _earliest(self.next_due, at)
        self.pending.append(Ended(idx=lc.idx, attempt=lc.attempt, outcome=outcome, retry_at=at))
        self.live.pop(lc.call_id, None)
        self.wake = True

    async def follow_all(self, calls: list[LiveCall]) -> None:
        """Calls an earlier run started: one activity waits for the next of them to end."""
        left = {lc.call_id: lc for lc in calls}
        while left:
            got = await workflow.execute_activity_method(
                CampaignActivities.campaign_await_calls,
                list(left),
                start_to_close_timeout=timedelta(days=1),
                heartbeat_timeout=timedelta(seconds=60),
                retry_policy=RETRY,
            )
            for call_id, outcome in got.items():
                if (lc := left.pop(call_id, None)) is not None:
                    self.ended(lc, outcome)

    def arm(self, free: int) -> None:
        """One timer for the next due time, armed only when it is earlier than the one armed
        (a timer cancelled at every wake-up would be two events each time)."""
        at = self.next_due
        if at is None or free <= 0 or self.rounds >= LOOKAHEAD:
            return
        if self.timer_at is not None and self.timer_at <= at:
            return
        self.timer_at = at
        self.spawn(self.alarm(at))

    async def alarm(self, at: float) -> None:
        await asyncio.sleep(max(0.05, at - workflow.now().timestamp()))
        if self.timer_at == at:
            self.timer_at = None
        self.wake = True

    # --- control ------------------------------------------------------------------------
    @workflow.update
    def pause(self, reason: str | None = None) -> str:
        self.hold(reason or "paused by an operator")
        return self.status()

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
            "rounds": self.rounds,
            "ended_not_recorded": len(self.pending),
            "attempts_last_minute": last_minute,
            "attempts_per_second": round(last_minute / 60.0, 3),
            "next_due": self.next_due,
            "limits": self.limits.model_dump(),
            "stats": self.stats,
            "runs": self.runs,
            "history_events": self.events_before + workflow.info().get_current_history_length(),
        }
