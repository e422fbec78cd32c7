"""FlowCanaryWorkflow (id ``flow-canary-<canary id>``): one canary, watched until it settles.

A canary sends a share of a channel's new calls to a candidate version
(``activities/flow_canaries.py`` splits them). This workflow reads what both sides' ended
calls did every ``check_every_s`` (an activity: the call records are in the database), runs
the sequential test (``callflow/canary.py``) on the sums, and settles the canary itself: it
promotes the candidate when it is no worse at the configured confidence, and rolls it back
the moment it is worse, recording why. Being a workflow, it keeps watching across worker
restarts and deploys, and nobody has to be awake for the rollback.

The decision is pure arithmetic on an activity's answer, so a replay decides the same. The
``status`` query shows both sides and the decision so far; its search attributes
(``RingflowFlow`` = the flow, ``RingflowStatus`` = ``canary_running``, ``canary_promoted``,
``canary_rolled_back``) find it in the Temporal UI beside
``WorkflowType = 'FlowCanaryWorkflow'``. ``stop`` (a signal) rolls it back with the reason
given. History stays bounded: it continues as new every ``checks_per_run`` checks.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue, RetryPolicy

with workflow.unsafe.imports_passed_through():
    from ringflow.activities.flow_canaries import CanaryActivities, SettleRequest, SideOutcomes
    from ringflow.activities.search_attributes import RINGFLOW_FLOW, RINGFLOW_STATUS
    from ringflow.callflow.canary import Verdict, decide
    from ringflow.contract.canary import CanaryInput, CanaryView, StopRequest

RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))
ACTIVITY_TIMEOUT = timedelta(seconds=60)


@workflow.defn(name="FlowCanaryWorkflow")
class FlowCanaryWorkflow:
    @workflow.init
    def __init__(self, inp: CanaryInput) -> None:
        self.inp = inp
        self.view = inp.carry or CanaryView(
            canary_id=inp.canary_id,
            name=inp.name,
            channel=inp.channel,
            candidate=inp.candidate,
            baseline=inp.baseline,
            percent=inp.percent,
        )
        self.stop_reason: str | None = None
        self.shown: str | None = None

    @workflow.run
    async def run(self, inp: CanaryInput) -> CanaryView:
        self.show()
        checks_this_run = 0
        while True:
            seen: SideOutcomes = await workflow.execute_activity_method(
                CanaryActivities.canary_outcomes,
                inp.canary_id,
                start_to_close_timeout=ACTIVITY_TIMEOUT,
                retry_policy=RETRY,
            )
            verdict = decide(seen.candidate, seen.baseline, inp.policy)
            if self.stop_reason is not None and verdict.decision != "rollback":
                verdict = Verdict(decision="rollback", reason=self.stop_reason, checks=verdict.checks)
            self.view = self.view.model_copy(
                update={
                    "checks": self.view.checks + 1,
                    "candidate_stats": seen.candidate,
                    "baseline_stats": seen.baseline,
                    "verdict": verdict,
                }
            )
            if verdict.decision != "continue":
                await workflow.execute_activity_method(
                    CanaryActivities.canary_settle,
                    SettleRequest(canary_id=inp.canary_id, decision=verdict.decision, reason=verdict.reason),
                    start_to_close_timeout=ACTIVITY_TIMEOUT,
                    retry_policy=RETRY,
                )
                done = "promoted" if verdict.decision == "promote" else "rolled_back"
                self.view = self.view.model_copy(update={"status": done})
                self.show()
                return self.view
            self.show()
            checks_this_run += 1
            if checks_this_run >= inp.checks_per_run or workflow.info().is_continue_as_new_suggested():
                workflow.continue_as_new(inp.model_copy(update={"carry": self.view}))
            try:
                await workflow.wait_condition(
                    lambda: self.stop_reason is not None, timeout=timedelta(seconds=inp.check_every_s)
                )
            except TimeoutError:
                pass

    @workflow.signal(name="stop")
    def stop(self, raw: RawValue) -> None:
        try:
            req = workflow.payload_converter().from_payload(raw.payload, StopRequest)
        except Exception as exc:  # a malformed stop is still a stop: the operator meant it
            if isinstance(exc, asyncio.CancelledError):
                raise
            req = StopRequest()
        if self.stop_reason is None:
            self.stop_reason = f"stopped: {req.reason}"

    @workflow.query(name="status")
    def status(self, *_: Any) -> CanaryView:
        return self.view

    def show(self) -> None:
        """The search attributes (one upsert per change) and the current details."""
        status = f"canary_{self.view.status}"
        verdict = self.view.verdict
        workflow.set_current_details(
            f"**{status}** {self.view.name}@{self.view.candidate} vs {self.view.channel} "
            f"({self.view.baseline}) at {self.view.percent:g}%"
            + (f" · {verdict.reason}" if verdict is not None else "")
        )
        if status != self.shown:
            self.shown = status
            workflow.upsert_search_attributes(
                [RINGFLOW_FLOW.value_set(self.view.name), RINGFLOW_STATUS.value_set(status)]
            )
