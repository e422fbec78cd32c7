"""A campaign's calls: each attempt's child ``CallWorkflow``, built and started as ``ringflow
call dial`` starts a call, its outcome, and the calls an earlier run started, followed by one
activity. A campaign of journeys (``CampaignInput.journeys``) starts the contact's
``JourneyWorkflow`` instead, whose first call is the attempt (its slot) and whose later calls
keep to the campaign's windows, pace and do-not-call list. Deterministic workflow code, run
by ``CampaignWorkflow`` (``workflows/campaign.py``), which keeps the campaign's own counts
and state.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributePair, TypedSearchAttributes, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.workflow import ChildWorkflowHandle, ParentClosePolicy

if TYPE_CHECKING:
    from temporalio.client import Client

with workflow.unsafe.imports_passed_through():
    from ringflow.activities.campaign_acts import CampaignActivities
    from ringflow.activities.campaign_store import Claimed, Outcome, journey_outcome
    from ringflow.activities.search_attributes import (
        RINGFLOW_CAMPAIGN,
        RINGFLOW_FLOW,
        RINGFLOW_JOURNEY,
        RINGFLOW_STATUS,
    )
    from ringflow.callflow.errors import FlowError
    from ringflow.contract.dial import Dial
    from ringflow.contract.journey import JOURNEY_WORKFLOW, JourneyInput, JourneyRetry, JourneyView
    from ringflow.contract.records import CallRecord
    from ringflow.workflows.call import CallWorkflow
    from ringflow.workflows.campaign_messages import CampaignInput
    from ringflow.workflows.client import call_root, checked_call_input, workflow_id
    from ringflow.workflows.trace_ids import child_root, under

RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))


def call_input(inp: CampaignInput, c: Claimed) -> Any:
    """The child's input and search attributes, built as ``ringflow call dial`` builds a
    call's (:func:`workflows.client.checked_call_input`); raises FlowError for bad variables.
    The dial waits for the attempt's slot (``Dial.not_before``), so the call starts ahead.
    A traced campaign gives each call a trace of its own (``workflows/trace_ids.py``)."""
    call_inp, attrs = attempt_input(inp, c)
    if carrier := child_root(c.call_id, inp.definition.flow.flow):
        call_inp = call_inp.model_copy(update={"trace": carrier})
    return call_inp, attrs


def attempt_input(inp: CampaignInput, c: Claimed) -> Any:
    """An attempt's call input and search attributes, whoever starts it (the campaign
    workflow's child, or a drive: :class:`DriveStarter`). Pure: no workflow API."""
    dial = Dial(
        to=c.phone,
        from_number=inp.from_number,
        trunk_id=inp.trunk_id,
        ringing_timeout_s=inp.ringing_timeout_s,
        not_before=c.slot,
    )
    definition, flow_ref, side = inp.flow_for(c.idx)  # a canary on the campaign's channel splits them
    call_inp, attrs = checked_call_input(
        definition,
        c.call_id,
        c.variables,
        {"dial": dial, "campaign_id": inp.campaign_id, "agent_timeout_s": inp.agent_timeout_s}
        | ({"flow_ref": flow_ref} if flow_ref is not None else {})
        | ({"canary": side} if side is not None else {}),
    )
    return call_inp, attrs


async def start_call(
    inp: CampaignInput, c: Claimed, call_inp: Any, attrs: Any
) -> ChildWorkflowHandle[Any, Any]:
    """Start the attempt's call; a cancelled campaign abandons it (never cuts it), and its id
    is started once (``WorkflowAlreadyStartedError`` when it exists). Started under the
    call's own root span, when it has one."""
    with under(call_inp.trace):
        return await workflow.start_child_workflow(
            CallWorkflow.run,
            call_inp,
            id=workflow_id(c.call_id),
            search_attributes=attrs,
            parent_close_policy=ParentClosePolicy.ABANDON,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            static_summary=f"{inp.definition.flow.flow} campaign {inp.campaign_id} call",
        )


class DriveStarter:
    """How a campaign's drive (``CampaignActivities.campaign_drive``, an activity) starts an
    attempt's call: the input a child would have had, as a workflow of its own (no parent: a
    cancelled or continued campaign never cuts it), under the attempt's id, started once
    (``REJECT_DUPLICATE``, closed ones included). The campaign follows it through the drives
    (the store's attempt rows name every call it started)."""

    def campaign(self, raw: dict[str, Any]) -> CampaignInput:
        return CampaignInput.model_validate(raw)

    async def start(self, client: Client, campaign: Any, c: Claimed, task_queue: str) -> str:
        inp: CampaignInput = campaign
        try:
            call_inp, attrs = attempt_input(inp, c)
        except FlowError as exc:  # a contact's variables the flow refuses: that contact fails
            return f"invalid: {str(exc)[:200]}"
        # its own trace, linked to the drive's span (an activity: a root of fresh ids, as
        # ``call dial`` makes; ``{}`` with tracing off)
        with call_root(c.call_id, inp.definition.flow.flow) as carrier:
            if carrier:
                call_inp = call_inp.model_copy(update={"trace": carrier})
            try:
                await client.start_workflow(
                    CallWorkflow.run,
                    call_inp,
                    id=workflow_id(c.call_id),
                    task_queue=task_queue,
                    search_attributes=attrs,
                    id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                    static_summary=f"{inp.definition.flow.flow} campaign {inp.campaign_id} call",
                )
            except WorkflowAlreadyStartedError:
                return "exists"
        return "started"


async def outcome_of(handle: ChildWorkflowHandle[Any, Any]) -> Outcome:
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


async def next_ended(call_ids: list[str]) -> dict[str, Outcome]:
    """Of calls an earlier run started: the next to end (and any ending within a second of
    it), by call id, through one activity for them all."""
    return await workflow.execute_activity_method(
        CampaignActivities.campaign_await_calls,
        call_ids,
        start_to_close_timeout=timedelta(days=1),
        heartbeat_timeout=timedelta(seconds=60),
        retry_policy=RETRY,
    )


def journey_input(inp: CampaignInput, c: Claimed, cps: float) -> tuple[JourneyInput, TypedSearchAttributes]:
    """The contact's journey: its first call at the attempt's slot, the campaign's retry
    rules as the journey's (a contact's retries live in the journey, not in the campaign),
    the campaign's windows in the contact's timezone and pace ``cps`` for every later call."""
    assert c.journey_id is not None, "a campaign of journeys' round names each contact's journey"
    definition, flow_ref, side = inp.flow_for(c.idx)
    jinp = JourneyInput(
        flow=definition,
        flow_ref=flow_ref,
        canary=side,
        phone=c.phone,
        timezone=c.tz,
        variables=c.variables,
        from_number=inp.from_number,
        trunk_id=inp.trunk_id,
        ringing_timeout_s=inp.ringing_timeout_s,
        agent_timeout_s=inp.agent_timeout_s,
        retry={k: JourneyRetry(count=r.count, delay_s=r.delay_s) for k, r in inp.retry.items()},
        campaign_id=inp.campaign_id,
        campaign_windows=inp.windows.model_dump(),
        pace_cps=cps,
        first_not_before=c.slot,
        open_for_s=inp.journey_open_for_s,
        time_scale=max(1.0, inp.time_scale),
    )
    attrs = TypedSearchAttributes(
        [
            SearchAttributePair(RINGFLOW_FLOW, inp.definition.flow.flow),
            SearchAttributePair(RINGFLOW_JOURNEY, c.journey_id),
            SearchAttributePair(RINGFLOW_STATUS, "scheduled"),
            SearchAttributePair(RINGFLOW_CAMPAIGN, inp.campaign_id),
        ]
    )
    return jinp, attrs


async def start_journey(
    inp: CampaignInput, c: Claimed, jinp: JourneyInput, attrs: TypedSearchAttributes
) -> ChildWorkflowHandle[Any, Any]:
    """Start the contact's journey, abandoned by a closing campaign (its calls are never cut:
    a cancelled campaign ends it by a signal). A journey of the person already open raises
    ``WorkflowAlreadyStartedError``: the campaign follows that one."""
    assert c.journey_id is not None
    return await workflow.start_child_workflow(
        JOURNEY_WORKFLOW,
        jinp,
        id=c.journey_id,
        search_attributes=attrs,
        parent_close_policy=ParentClosePolicy.ABANDON,
        result_type=JourneyView,
        static_summary=f"{inp.definition.flow.flow} campaign {inp.campaign_id} journey",
    )


async def journey_outcome_of(handle: ChildWorkflowHandle[Any, Any]) -> Outcome:
    """How the contact's journey ended: its last call's outcome (``dnc`` when the list ended it)."""
    try:
        view: JourneyView = await handle
        return journey_outcome(view.model_dump())
    except Exception as exc:
        if isinstance(exc, asyncio.CancelledError):
            raise
        return Outcome(end_reason="error", disposition=None)


async def next_ended_journeys(journey_ids: list[str]) -> dict[str, Outcome]:
    """As :func:`next_ended`, for journeys an earlier run started (by journey id)."""
    return await workflow.execute_activity_method(
        CampaignActivities.campaign_await_journeys,
        journey_ids,
        start_to_close_timeout=timedelta(days=30),
        heartbeat_timeout=timedelta(seconds=60),
        retry_policy=RETRY,
    )
