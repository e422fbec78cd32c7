"""What both of CampaignWorkflow's loops share: its state, status and search attributes,
the child call's start, continue-as-new, and the end (counts, the campaign-finished webhook).

The loops are in ``workflows/campaign.py`` (rounds: many attempts per activity) and
``workflows/campaign_legacy.py`` (one activity per step of each attempt, kept so campaigns
started on that code replay and finish on it).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError
from temporalio.workflow import ChildWorkflowHandle, ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from ringflow.activities.campaign_acts import FinishedRequest
    from ringflow.activities.campaign_store import Claimed, Outcome
    from ringflow.activities.search_attributes import RINGFLOW_CAMPAIGN, RINGFLOW_FLOW, RINGFLOW_STATUS
    from ringflow.contract.dial import Dial
    from ringflow.contract.records import CallRecord
    from ringflow.workflows.call import CallWorkflow
    from ringflow.workflows.campaign_messages import CampaignCarry, CampaignInput, Limits, LiveCall
    from ringflow.workflows.client import checked_call_input, workflow_id

RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))
SHORT = timedelta(seconds=60)


class CampaignBase:
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
        self.pending = list(c.pending)  # calls ended, not recorded yet (rounds)
        self.release = list(c.release)  # attempts claimed but not dialed, to give back (rounds)
        self.to_start = list(c.to_start)  # calls to start (again): see CampaignWorkflow.run
        self.unconfirmed: dict[str, Claimed] = {}  # calls started, the start not confirmed yet
        self.starting = 0  # claimed attempts not yet dialed (pacing, last checks)
        self.rounds = 0  # round activities in flight
        self.next_due: float | None = None
        self.exhausted = False
        self.wake = False
        self.shown: str | None = None

    # --- the child call -----------------------------------------------------------------
    def call_input(self, c: Claimed) -> Any:
        """The child's input and search attributes, built as ``ringflow call dial`` builds a
        call's (:func:`workflows.client.checked_call_input`); raises FlowError for bad variables."""
        inp = self.inp
        dial = Dial(
            to=c.phone,
            from_number=inp.from_number,
            trunk_id=inp.trunk_id,
            ringing_timeout_s=inp.ringing_timeout_s,
            not_before=c.slot,
        )
        return checked_call_input(
            inp.definition,
            c.call_id,
            c.variables,
            {"dial": dial, "campaign_id": inp.campaign_id, "agent_timeout_s": inp.agent_timeout_s},
        )

    async def start_call(
        self, c: Claimed, call_inp: Any, attrs: Any, again: bool = False
    ) -> ChildWorkflowHandle[Any, Any]:
        """Start the attempt's call; a cancelled campaign abandons it (never cuts it), and its
        id is started once (``WorkflowAlreadyStartedError`` when it exists). ``again``: a
        start an earlier run made without seeing it confirmed (counted there)."""
        self.live[c.call_id] = LiveCall(idx=c.idx, attempt=c.attempt, call_id=c.call_id)
        if not again:
            self.count("dialed")
            now = workflow.now().timestamp()
            self.recent = [t for t in self.recent if t > now - 60.0] + [now]
        return await workflow.start_child_workflow(
            CallWorkflow.run,
            call_inp,
            id=workflow_id(c.call_id),
            search_attributes=attrs,
            parent_close_policy=ParentClosePolicy.ABANDON,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            static_summary=f"{self.flow()} campaign {self.inp.campaign_id} call",
        )

    async def outcome_of(self, handle: ChildWorkflowHandle[Any, Any]) -> Outcome:
        """How the attempt's call ended (a failed call workflow: ``error``)."""
        try:
            rec: CallRecord = await handle
            return Outcome(
                end_reason=rec.end_reason or "error", disposition=rec.disposition, extracted=rec.extracted
            )
        except Exception as exc:
            if isinstance(exc, asyncio.CancelledError):
                raise
            return Outcome(end_reason="error", disposition=None)

    # --- the end ------------------------------------------------------------------------
    async def finish(self, status: str) -> dict[str, Any]:
        inp = self.inp
        counts = await workflow.execute_activity(
            "campaign_counts",
            inp.campaign_id,
            result_type=dict,
            start_to_close_timeout=SHORT,
            retry_policy=RETRY,
        )
        self.show(status)
        try:
            await workflow.execute_activity(
                "campaign_finished",
                FinishedRequest(
                    campaign_id=inp.campaign_id, flow=self.flow(), status=status, stats=self.stats
                ),
                result_type=str,
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
            self.paused = True
            self.pause_reason = reason[:300]
            self.show()

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
        )
        return self.inp.model_copy(update={"carry": carry})
