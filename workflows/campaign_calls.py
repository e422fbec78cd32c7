"""A campaign's calls: each attempt's child ``CallWorkflow``, built and started as ``ringflow
call dial`` starts a call, its outcome, and the calls an earlier run started, followed by one
activity. Deterministic workflow code, run by ``CampaignWorkflow`` (``workflows/campaign.py``),
which keeps the campaign's own counts and state.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, WorkflowIDReusePolicy
from temporalio.workflow import ChildWorkflowHandle, ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from ringflow.activities.campaign_acts import CampaignActivities
    from ringflow.activities.campaign_store import Claimed, Outcome
    from ringflow.contract.dial import Dial
    from ringflow.contract.records import CallRecord
    from ringflow.workflows.call import CallWorkflow
    from ringflow.workflows.campaign_messages import CampaignInput
    from ringflow.workflows.client import checked_call_input, workflow_id
    from ringflow.workflows.trace_ids import child_root, under

RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))


def call_input(inp: CampaignInput, c: Claimed) -> Any:
    """The child's input and search attributes, built as ``ringflow call dial`` builds a
    call's (:func:`workflows.client.checked_call_input`); raises FlowError for bad variables.
    The dial waits for the attempt's slot (``Dial.not_before``), so the call starts ahead.
    A traced campaign gives each call a trace of its own (``workflows/trace_ids.py``)."""
    dial = Dial(
        to=c.phone,
        from_number=inp.from_number,
        trunk_id=inp.trunk_id,
        ringing_timeout_s=inp.ringing_timeout_s,
        not_before=c.slot,
    )
    call_inp, attrs = checked_call_input(
        inp.definition,
        c.call_id,
        c.variables,
        {"dial": dial, "campaign_id": inp.campaign_id, "agent_timeout_s": inp.agent_timeout_s}
        | ({"flow_ref": inp.flow_ref} if inp.flow_ref is not None else {}),
    )
    if carrier := child_root(c.call_id, inp.definition.flow.flow):
        call_inp = call_inp.model_copy(update={"trace": carrier})
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
