"""CampaignWorkflow (id ``campaign-<id>``): many outbound calls, paced, in windows, retried.

It holds no contacts: they are rows in the database. A run that started with patch
``campaign-round-starts-calls`` (every new campaign, and the next run of an older one after
its continue-as-new) works in drives (:meth:`CampaignWorkflow.drive_run`): one activity,
``campaign_drive``, claims, paces, checks and starts the calls itself, follows them and
records their outcomes, for about ``drive_s``, so the history holds ~6 events per drive
instead of ~9 per attempt and a run holds tens of thousands of attempts before it continues
as new. A campaign of journeys, and a run that started before the patch, work as follows.

The workflow works in rounds: one
activity (``campaign_round``) records the calls that ended since the last round, claims the
next batch of due contacts (applying the calling windows, the do-not-call list and
``max_attempts``), paces each attempt on the trunk's shared limiter and checks the
do-not-call list and the window once more right at its slot; the workflow then starts the
batch's calls as child ``CallWorkflow``s, each exactly as ``ringflow call dial`` starts a
call (:func:`workflows.client.checked_call_input`: same input and search attributes, plus
``RingflowCampaign``). Up to three rounds are in flight, each reserving the slots
right after the one before, so the pace has no gaps; a round holds about a second of the pace
(``cps`` attempts), which is what keeps the history short: the events per attempt are
mostly the child's own (started, completed) and the workflow tasks they cause. A round comes
back ``LEAD_S`` before its first slot (its last checks made then, for the slot's time) and
each call carries its slot (``Dial.not_before``): the call starts ahead, its room and agent
get ready, and its dial waits for the slot. So the dials keep the pace whatever the
workflow's own latency shorter than the lead (a continue-as-new leaves no gap); a pause or
cancel stops the calls not started yet, the ones started (their slot within about
``LEAD_S``) still dial. A retry's due time is a guess the workflow makes from the rules (no
timer per contact, no activity per outcome); the round that runs then records it and claims
what is due. The child calls themselves are ``workflows/campaign_calls.py``.

A child outlives a cancelled campaign (``ParentClosePolicy.ABANDON``): cancelling stops new
dials and never cuts a live call. The call id is ``<campaign>-<contact>-<attempt>``,
written in the attempt row before the dial: Temporal starts a child id once, so no attempt
is ever dialed twice, whatever restarts. Past ``max_history_events`` the campaign continues
as new, carrying the live calls (followed together by one activity in the next run), the
outcomes not recorded yet and the calls whose start was not confirmed (the next run starts
them again under the same ids: a child whose parent run closed before the server started it
is never started, one that did start is followed).
"""

from __future__ import annotations

import asyncio
import math
from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    from ringflow.activities.campaign_acts import (
        BREAKER_FAILURES,
        BREAKER_SHARE,
        BREAKER_WINDOW_S,
        MAX_BATCH,
        Attempt,
        CampaignActivities,
        DriveRequest,
        DriveResult,
        Ended,
        FinishedRequest,
        RoundRequest,
        RoundResult,
        Started,
    )
    from ringflow.activities.campaign_store import Claimed, Outcome, classify
    from ringflow.activities.search_attributes import RINGFLOW_CAMPAIGN, RINGFLOW_FLOW, RINGFLOW_STATUS
    from ringflow.callflow.errors import FlowError
    from ringflow.contract.journey import EndRequest, HoldRequest
    from ringflow.workflows.campaign_calls import (
        RETRY,
        call_input,
        journey_input,
        journey_outcome_of,
        next_ended,
        next_ended_journeys,
        outcome_of,
        start_call,
        start_journey,
    )
    from ringflow.workflows.campaign_messages import (
        CampaignCarry,
        CampaignInput,
        Limits,
        LimitsChange,
        LiveCall,
    )
    from ringflow.workflows.patches import CAMPAIGN_DIAL_BREAKER, CAMPAIGN_DRIVES, CAMPAIGN_HOLDS_JOURNEYS

SHORT = timedelta(seconds=60)
LEAD_S = 3.0  # calls start this long before their slot, and their dial waits for it
LOOKAHEAD = 3  # rounds in flight at most (a slow workflow task between rounds leaves no gap)
ROUND_S = 1.0  # a round claims about this many seconds of the pace


def _earliest(*times: float | None) -> float | None:
    known = [t for t in times if t is not None]
    return min(known) if known else None


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
        # a campaign of journeys: the open ones, by call id (not held to ``max_concurrent``:
        # a journey waits days between its calls, each paced on the trunk)
        self.journeys: dict[str, LiveCall] = {lc.call_id: lc for lc in c.journeys}
        self.ending = False  # a cancelled campaign of journeys has asked them to end
        self.stats: dict[str, int] = dict(c.stats)
        self.recent: list[float] = list(c.recent)
        self.paused = c.paused
        self.pause_reason = c.pause_reason
        self.cancelled = c.cancelled
        self.runs = c.runs
        self.events_before = c.events_before
        self.pending = list(c.pending)  # calls ended, not recorded yet
        self.release = list(c.release)  # attempts claimed but not dialed, to give back
        self.to_start = list(c.to_start)  # calls to start (again): see run
        self.unconfirmed: dict[str, Claimed] = {}  # calls started, the start not confirmed yet
        self.starting = 0  # claimed attempts not yet dialed (pacing, last checks)
        self.rounds = 0  # round activities in flight
        self.next_due: float | None = None
        self.wake = False
        self.shown: str | None = None
        self.returned = 0  # rounds returned so far (this run)
        self.in_flight: list[int] = []  # each round in flight: ``returned`` when it began
        self.retry_log: list[tuple[int, float]] = []  # (round number, earliest retry it set)
        self.timer_at: float | None = None
        self.dial_results: list[tuple[float, bool]] = []  # (ended at, failed to dial), the window's

    @workflow.run
    async def run(self, inp: CampaignInput) -> dict[str, Any]:
        # Asked first, once per run: a run that started before the patch replays the rounds
        # and children it ran; a new run (a continue-as-new of an old campaign included: its
        # carry is live calls, calls to start and outcomes, all of which a drive takes) drives.
        if not self.inp.journeys and workflow.patched(CAMPAIGN_DRIVES):
            return await self.drive_run()
        if self.carried:
            self.spawn(self.follow_all(self.carried))
        if self.journeys:
            self.spawn(self.follow_all(list(self.journeys.values())))
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
                # Not waiting for the calls' starts to be confirmed (seconds on a loaded
                # server, with no dials meanwhile): the next run starts those again, under
                # the same id, so each still starts once (a child whose parent run closed
                # before the server started it is not started).
                await workflow.wait_condition(lambda: not self.rounds)
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
        if self.journeys:
            await self.await_journeys()
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
            retry={} if self.inp.journeys else self.inp.retry,
            time_scale=self.inp.time_scale,
            lead_s=LEAD_S,
            journeys_of=self.flow() if self.inp.journeys else None,
            canary_id=self.open_canary(),
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
        self.inp = self.inp.canary_settled(res.canary_settled)  # before its contacts' journeys start
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
            else:  # started now, for their slot (those not confirmed by a continue-as-new: ``carry``)
                self.spawn(self.call(c))
        self.wake = True

    async def call(self, c: Claimed, again: bool = False) -> None:
        if self.inp.journeys:
            return await self.journey(c, again)
        lc = LiveCall(idx=c.idx, attempt=c.attempt, call_id=c.call_id)
        try:
            try:
                call_inp, attrs = call_input(self.inp, c)
            except FlowError as exc:  # a contact's variables the flow refuses: that contact fails
                self.ended(lc, Outcome(end_reason="invalid_contact", disposition=str(exc)[:200]))
                return
            self.unconfirmed[c.call_id] = c
            self.live[c.call_id] = lc
            if not again:  # again: a start an earlier run made without seeing it confirmed, counted there
                self.count("dialed")
                now = workflow.now().timestamp()
                self.recent = [t for t in self.recent if t > now - 60.0] + [now]
            try:
                handle = await start_call(self.inp, c, call_inp, attrs)
            except WorkflowAlreadyStartedError:  # this attempt's call exists: follow it, never dial again
                self.spawn(self.follow_all([lc]))
                return
        finally:
            self.unconfirmed.pop(c.call_id, None)
            self.starting -= 1
            self.wake = True
        self.ended(lc, await outcome_of(handle))

    async def journey(self, c: Claimed, again: bool) -> None:
        """A campaign of journeys: the attempt starts the contact's journey (its first call
        is the attempt, at its slot); the attempt ends when the journey does."""
        lc = LiveCall(idx=c.idx, attempt=c.attempt, call_id=c.call_id, journey_id=c.journey_id)
        try:
            try:
                call_input(self.inp, c)  # the contact's variables, checked as a call's
                jinp, attrs = journey_input(self.inp, c, self.limits.cps)
            except FlowError as exc:
                self.ended(lc, Outcome(end_reason="invalid_contact", disposition=str(exc)[:200]))
                return
            self.unconfirmed[c.call_id] = c
            self.journeys[c.call_id] = lc
            if not again:
                self.count("dialed")
                self.count("journeys")
                now = workflow.now().timestamp()
                self.recent = [t for t in self.recent if t > now - 60.0] + [now]
            try:
                handle = await start_journey(self.inp, c, jinp, attrs)
            except WorkflowAlreadyStartedError:  # the person's journey is open: follow that one
                self.spawn(self.follow_all([lc]))
                return
        finally:
            self.unconfirmed.pop(c.call_id, None)
            self.starting -= 1
            self.wake = True
        self.ended(lc, await journey_outcome_of(handle))

    async def await_journeys(self) -> None:
        """A campaign of journeys, every contact claimed: until its last journey ends, each
        outcome recorded as it comes, and continuing as new when the history is long; a
        cancel ends them (their live calls go on)."""
        while self.journeys:
            if self.cancelled and not self.ending:
                self.ending = True
                self.show("cancelling")
                await self.end_journeys()
            if self.pending and not self.rounds:
                self.begin_round(0)
            if self.should_continue_as_new():
                await workflow.wait_condition(lambda: not self.rounds)
                workflow.continue_as_new(self.carry())
            await workflow.wait_condition(
                lambda: (
                    not self.journeys
                    or (self.cancelled and not self.ending)
                    or (bool(self.pending) and not self.rounds)
                )
            )

    async def end_journeys(self) -> None:
        """A cancelled campaign: no further call in its journeys (a live one goes on)."""
        for lc in list(self.journeys.values()):
            if lc.journey_id is not None:
                ext = workflow.get_external_workflow_handle(lc.journey_id)
                try:
                    await ext.signal("end", EndRequest(reason="cancelled"))
                except Exception as exc:  # ended meanwhile: nothing to stop
                    if isinstance(exc, asyncio.CancelledError):
                        raise

    def hold_journeys(self, held: bool) -> None:
        """A campaign of journeys paused (or resumed): its open journeys hold their next calls
        (a follow-up, a retry) until it resumes; a live call goes on."""
        if not self.journeys or not workflow.patched(CAMPAIGN_HOLDS_JOURNEYS):
            return
        ids = [lc.journey_id for lc in self.journeys.values() if lc.journey_id is not None]
        self.spawn(self.signal_journeys(ids, HoldRequest(held=held)))

    async def signal_journeys(self, ids: list[str], req: HoldRequest) -> None:
        for jid in ids:
            try:
                await workflow.get_external_workflow_handle(jid).signal("hold", req)
            except Exception as exc:  # ended meanwhile: nothing to hold
                if isinstance(exc, asyncio.CancelledError):
                    raise

    def ended(self, lc: LiveCall, outcome: Outcome) -> None:
        """Kept for the next round to record; a retryable outcome makes a round due when its
        retry could be (the round learns the real time from the database)."""
        self.count(f"outcome_{outcome.end_reason}")
        # a campaign of journeys: the journey made the retries
        rule = None if self.inp.journeys else self.inp.retry.get(classify(outcome.end_reason))
        at = None
        if rule is not None and rule.count > 0:
            at = workflow.now().timestamp() + rule.delay_s / self.inp.time_scale
            self.next_due = _earliest(self.next_due, at)
        self.pending.append(Ended(idx=lc.idx, attempt=lc.attempt, outcome=outcome, retry_at=at))
        self.live.pop(lc.call_id, None)
        self.journeys.pop(lc.call_id, None)
        self.wake = True
        self.watch_dials(outcome.end_reason == "dial_failed")

    def watch_dials(self, failed: bool) -> None:
        """The circuit breaker (see BREAKER_WINDOW_S). Patched: a campaign that started before
        it replays its history as it ran (``patched`` is asked only when it would trip)."""
        now = workflow.now().timestamp()
        self.dial_results = [r for r in self.dial_results if r[0] > now - BREAKER_WINDOW_S]
        self.dial_results.append((now, failed))
        failures = sum(1 for _, f in self.dial_results if f)
        if failures < BREAKER_FAILURES or failures < BREAKER_SHARE * len(self.dial_results):
            return
        if self.paused or self.cancelled or not workflow.patched(CAMPAIGN_DIAL_BREAKER):
            return
        reason = (
            f"circuit breaker: {failures} of the last {len(self.dial_results)} attempts failed to "
            f"dial within {BREAKER_WINDOW_S:.0f} s (LiveKit or the trunk refusing calls); fix it, "
            f"then `ringflow campaign resume {self.inp.campaign_id}`"
        )
        workflow.logger.warning("campaign %s paused itself: %s", self.inp.campaign_id, reason)
        self.count("breaker_tripped")
        self.dial_results = []
        self.hold(reason)

    async def follow_all(self, calls: list[LiveCall]) -> None:
        """Calls an earlier run started: one activity waits for the next of them to end."""
        left = {lc.journey_id or lc.call_id: lc for lc in calls}
        while left:
            got = await (next_ended_journeys(list(left)) if self.inp.journeys else next_ended(list(left)))
            for key, outcome in got.items():
                if (lc := left.pop(key, None)) is not None:
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

    # --- drives: the rounds start their calls ------------------------------------------
    # A drive (``CampaignActivities.campaign_drive``) claims, paces and checks as a round
    # does, starts each attempt's call itself (a workflow with no parent, under the attempt's
    # id, started once), follows the live calls and records each outcome in the store as it
    # comes, for about ``CampaignInput.drive_s``; it asks the campaign for pause, cancel and
    # limits by a query.
    # The history holds one activity (and its workflow task) per drive, whatever the
    # attempts in it: ~6 events per ``drive_s`` instead of ~9 per attempt. Between two drives the
    # calls started for the next LEAD_S of slots keep the pace (a continue-as-new included).
    async def drive_run(self) -> dict[str, Any]:
        self.live = {lc.call_id: lc for lc in self.carried}
        self.next_due = 0.0  # unknown: the first drive asks the database
        while True:
            self.show()
            if self.should_continue_as_new():
                workflow.continue_as_new(self.carry())
            dial = not self.paused and not self.cancelled
            work = bool(self.live or self.to_start or self.pending or self.release)
            if not dial and not work:
                if self.cancelled:
                    break
                self.wake = False
                await workflow.wait_condition(lambda: not self.paused or self.cancelled or self.wake)
                continue
            if dial and not work:
                if self.next_due is None:
                    break  # every contact is closed: the campaign is done
                if self.next_due > workflow.now().timestamp():
                    self.wake = False
                    self.arm(1)
                    await workflow.wait_condition(lambda: self.wake or self.cancelled or self.paused)
                    continue
            await self.drive(dial)
        self.show("cancelled" if self.cancelled else "finishing")
        return await self.finish("cancelled" if self.cancelled else "finished")

    async def drive(self, dial: bool) -> None:
        key = f"drive-{self.claims}"
        self.claims += 1
        ended, self.pending = self.pending, []
        release, self.release = self.release, []
        to_start, self.to_start = self.to_start, []
        live = list(self.live.values())
        req = DriveRequest(
            campaign_id=self.inp.campaign_id,
            campaign_workflow_id=workflow.info().workflow_id,
            claim_key=key,
            windows=self.inp.windows,
            trunk=self.inp.trunk_id,
            max_concurrent=self.limits.max_concurrent,
            cps=self.limits.cps,
            max_attempts=self.limits.max_attempts,
            retry=self.inp.retry,
            time_scale=self.inp.time_scale,
            lead_s=LEAD_S,
            budget_s=self.inp.drive_s,
            dial=dial,
            paused=self.paused,
            cancelled=self.cancelled,
            live=[Started(idx=lc.idx, attempt=lc.attempt, call_id=lc.call_id) for lc in live],
            to_start=to_start,
            ended=ended,
            release=release,
            dial_results=self.dial_results,
            campaign=self.inp.model_copy(update={"carry": None}).model_dump(mode="json"),
        )
        self.rounds = 1
        try:
            res: DriveResult = await workflow.execute_activity_method(
                CampaignActivities.campaign_drive,
                req,
                start_to_close_timeout=timedelta(hours=2),
                heartbeat_timeout=timedelta(seconds=30),
                retry_policy=RETRY,
            )
        except Exception as exc:  # no pacing (no Redis): pause, keep what the drive carried
            self.pending = ended + self.pending
            self.release = release + self.release
            self.to_start = to_start + self.to_start
            self.hold(f"pacing failed: {str(getattr(exc, 'cause', None) or exc)[:300]}")
            return
        finally:
            self.rounds = 0
        self.live = {s.call_id: LiveCall(idx=s.idx, attempt=s.attempt, call_id=s.call_id) for s in res.live}
        self.inp = self.inp.canary_settled(res.canary_settled)  # later drives and runs keep to it
        self.next_due = res.next_due
        self.dial_results = res.dial_results
        self.count("dialed", len(res.dialed))
        now = workflow.now().timestamp()
        self.recent = [t for t in self.recent if t > now - 60.0] + [t for t in res.dialed if t > now - 60.0]
        self.count("out_of_window_deferred", res.out_of_window)
        for reason, n in res.outcomes.items():
            self.count(f"outcome_{reason}", n)
        for state, n in res.states.items():
            self.count(f"contact_{state}", n)
        for why, n in res.skipped.items():
            self.count(f"not_dialed_{why}", n)
        if res.breaker is not None and not self.paused and not self.cancelled:
            workflow.logger.warning("campaign %s paused itself: %s", self.inp.campaign_id, res.breaker)
            self.count("breaker_tripped")
            self.hold(res.breaker)

    def open_canary(self) -> str | None:
        """The canary whose split this campaign still applies (a round asks whether it has
        settled), if any."""
        c = self.inp.canary
        return c.canary_id if c is not None and c.settled is None else None

    @workflow.query
    def drive_control(self) -> dict[str, Any]:
        """What a drive keeps to between the campaign's workflow tasks."""
        return {"paused": self.paused, "cancelled": self.cancelled, "limits": self.limits.model_dump()}

    # --- the end ------------------------------------------------------------------------
    async def finish(self, status: str) -> dict[str, Any]:
        inp = self.inp
        counts = await workflow.execute_activity_method(
            CampaignActivities.campaign_counts,
            inp.campaign_id,
            start_to_close_timeout=SHORT,
            retry_policy=RETRY,
        )
        self.show(status)
        try:
            await workflow.execute_activity_method(
                CampaignActivities.campaign_finished,
                FinishedRequest(
                    campaign_id=inp.campaign_id, flow=self.flow(), status=status, stats=self.stats
                ),
                start_to_close_timeout=SHORT,
                retry_policy=RetryPolicy(maximum_interval=timedelta(minutes=5), maximum_attempts=20),
            )
        except Exception as exc:
            workflow.logger.warning("campaign webhook not delivered: %s", str(exc)[:200])
        return {"campaign_id": inp.campaign_id, "status": status, "stats": self.stats, **counts}

    # --- helpers ------------------------------------------------------------------------
    def hold(self, reason: str) -> None:
        """Pause as an operator would; the workflow pauses itself this way when pacing fails
        (an update method is not meant to be called as a plain one)."""
        if not self.cancelled:
            was = self.paused
            self.paused = True
            self.pause_reason = reason[:300]
            self.show()
            if not was:
                self.hold_journeys(True)

    def status(self) -> str:
        if self.cancelled:
            return "cancelling" if (self.live or self.starting or self.rounds) else "cancelled"
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
            live=[lc for lc in self.live.values() if lc.call_id not in self.unconfirmed],
            stats=self.stats,
            recent=self.recent,
            paused=self.paused,
            pause_reason=self.pause_reason,
            cancelled=self.cancelled,
            limits=self.limits,
            runs=self.runs + 1,
            events_before=self.events_before + workflow.info().get_current_history_length(),
            pending=self.pending,
            release=self.release,
            to_start=self.to_start + list(self.unconfirmed.values()),
            journeys=[lc for lc in self.journeys.values() if lc.call_id not in self.unconfirmed],
        )
        return self.inp.model_copy(update={"carry": carry})

    # --- control ------------------------------------------------------------------------
    @workflow.update
    def pause(self, reason: str | None = None) -> str:
        self.hold(reason or "paused by an operator")
        return self.status()

    @workflow.update
    def resume(self) -> str:
        if self.paused:
            self.hold_journeys(False)
        self.paused, self.pause_reason = False, None
        self.dial_results = []  # the breaker counts afresh
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
            "journeys": len(self.journeys),
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
            "canary": self.canary_progress(),
        }

    def canary_progress(self) -> dict[str, Any] | None:
        """The canary the campaign's calls are split by, and how it settled (None: running)."""
        c = self.inp.canary
        if c is None:
            return None
        return {
            "canary_id": c.canary_id,
            "percent": c.percent,
            "candidate": c.flow_ref.version,
            "settled": c.settled,
        }
