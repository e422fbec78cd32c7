"""CampaignWorkflow's first loop: a claim per batch, then one activity per attempt for its
pace and last checks, one per outcome, one per call followed across continue-as-new.

Campaigns started on that code (no ``campaign-rounds-v1`` marker in their history) replay
and finish on it; new ones take the rounds of ``workflows/campaign.py``, which issue a
fraction of the events. Kept as it was: its commands must not change.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import WorkflowAlreadyStartedError

from ringflow.workflows.campaign_base import RETRY, SHORT, CampaignBase

with workflow.unsafe.imports_passed_through():
    from ringflow.activities.campaign_acts import (
        ClaimRequest,
        OutcomeRequest,
        OutcomeResult,
        PaceRequest,
        PredialRequest,
    )
    from ringflow.activities.campaign_store import Claimed, ClaimResult, Outcome
    from ringflow.callflow.errors import FlowError
    from ringflow.workflows.campaign_messages import CampaignInput, LiveCall


class LegacyLoop(CampaignBase):
    async def run_legacy(self, inp: CampaignInput) -> dict[str, Any]:
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
        return await self.finish("cancelled" if self.cancelled else "finished")

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
            start_to_close_timeout=SHORT,
            retry_policy=RETRY,
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
                        retry_policy=RETRY,
                    )
                except Exception as exc:
                    self.hold(f"pacing failed: {str(getattr(exc, 'cause', None) or exc)[:300]}")
                    verdict = "held"
            if verdict == "go" and (self.paused or self.cancelled):
                verdict = "held"  # paused while this attempt waited for its slot: not dialed
            if verdict == "held":
                await workflow.execute_activity(
                    "campaign_release", req, start_to_close_timeout=SHORT, retry_policy=RETRY
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
        outcome = await self.outcome_of(handle)
        await self.record(LiveCall(idx=c.idx, attempt=c.attempt, call_id=c.call_id), outcome)

    async def start_child(self, c: Claimed) -> Any:
        try:
            call_inp, attrs = self.call_input(c)
        except FlowError as exc:  # a contact's variables the flow refuses: that contact fails
            await self.record(
                LiveCall(idx=c.idx, attempt=c.attempt, call_id=c.call_id),
                Outcome(end_reason="invalid_contact", disposition=str(exc)[:200]),
            )
            return None
        try:
            return await self.start_call(c, call_inp, attrs)
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
            retry_policy=RETRY,
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
            start_to_close_timeout=SHORT,
            retry_policy=RETRY,
        )
        self.count(f"outcome_{outcome.end_reason}")
        self.count(f"contact_{res.state}")
        if res.next_at is not None:
            self.next_due = res.next_at if self.next_due is None else min(self.next_due, res.next_at)
        self.live.pop(lc.call_id, None)
        self.wake = True
