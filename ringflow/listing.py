"""A campaign or a journey as a list shows it, the same in ``ringflow campaign list``,
``ringflow journey list`` and ``GET /v1/campaigns``: its id, Ringflow's status and flow (search
attributes), Temporal's state of its workflow and its start. A visibility query: no worker."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from temporalio.client import Client

CAMPAIGNS = "WorkflowType = 'CampaignWorkflow'"


async def workflow_rows(
    client: Client, query: str, limit: int, *, id_key: str, prefix: str = ""
) -> list[dict[str, Any]]:
    """Up to ``limit`` workflows matching ``query``, newest first; each id under ``id_key``,
    without ``prefix``."""
    from ringflow.activities.search_attributes import RINGFLOW_FLOW, RINGFLOW_STATUS

    rows = []
    async for wf in client.list_workflows(query, limit=limit):
        attrs = wf.typed_search_attributes
        rows.append(
            {
                id_key: wf.id.removeprefix(prefix),
                "status": attrs.get(RINGFLOW_STATUS),
                "flow": attrs.get(RINGFLOW_FLOW),
                "workflow": wf.status.name if wf.status else None,
                "started_at": wf.start_time.isoformat() if wf.start_time else None,
            }
        )
    return rows
