"""Starting, stopping and reading canaries: what the CLI (and any other caller) uses.

It names the workflow by name and types it with the contract (``contract/canary.py``),
never by importing ``FlowCanaryWorkflow``, as ``workflows/client.py`` does for calls.
"""

from __future__ import annotations

import asyncio

from temporalio.client import Client
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from ringflow.activities import flow_canaries
from ringflow.activities.flow_canaries import Canary
from ringflow.activities.search_attributes import RINGFLOW_FLOW, RINGFLOW_STATUS
from ringflow.callflow.canary import CanaryPolicy
from ringflow.contract.canary import CANARY_WORKFLOW, CanaryInput, CanaryView, StopRequest


async def start_canary(
    client: Client,
    database_url: str,
    ref: str,
    percent: float,
    against: str,
    *,
    task_queue: str,
    policy: CanaryPolicy | None = None,
    check_every_s: float = 60.0,
) -> Canary:
    """Record the canary (new calls of ``NAME@against`` split from now on) and start its
    workflow; raises ``flow_canaries.CanaryError`` for a canary that cannot start."""
    canary = await asyncio.to_thread(flow_canaries.start_canary, database_url, ref, percent, against, policy)
    await watch_canary(client, database_url, canary, task_queue=task_queue, check_every_s=check_every_s)
    return canary


async def watch_canary(
    client: Client, database_url: str, canary: Canary, *, task_queue: str, check_every_s: float = 60.0
) -> None:
    """Start the workflow of a recorded canary; if it cannot start, the canary is rolled back
    (no call may be split by a canary nobody watches) and the error raised."""
    inp = CanaryInput(
        canary_id=canary.canary_id,
        name=canary.name,
        channel=canary.channel,
        candidate=canary.candidate,
        baseline=canary.baseline,
        percent=canary.percent,
        policy=canary.policy,
        check_every_s=check_every_s,
    )
    try:
        await client.start_workflow(
            CANARY_WORKFLOW,
            inp,
            id=canary.workflow_id,
            task_queue=task_queue,
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(RINGFLOW_FLOW, canary.name),
                    SearchAttributePair(RINGFLOW_STATUS, "canary_running"),
                ]
            ),
        )
    except BaseException as exc:  # no workflow watches it: no call may be split by it
        await asyncio.to_thread(
            flow_canaries.settle,
            database_url,
            canary.canary_id,
            "rollback",
            f"its workflow did not start: {type(exc).__name__}: {str(exc)[:300]}",
        )
        raise


async def canary_view(client: Client, canary: Canary) -> CanaryView:
    """Both sides and the decision: the running workflow's ``status`` query, or a settled
    one's result (read from its history: no worker needed)."""
    handle = client.get_workflow_handle(canary.workflow_id, result_type=CanaryView)
    desc = await handle.describe()
    if desc.status is not None and desc.status.name == "RUNNING":
        return await handle.query("status", result_type=CanaryView)
    return await handle.result()


async def stop_canary(client: Client, canary: Canary, reason: str) -> None:
    """Roll the canary back at its next look (at once: the signal wakes it)."""
    await client.get_workflow_handle(canary.workflow_id).signal("stop", StopRequest(reason=reason))
