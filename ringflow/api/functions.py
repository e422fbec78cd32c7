"""``GET /v1/calls/{id}/functions``: every function a call ran, read from its workflow's history
(the ``call_function`` updates: arguments, result, decision and timing). The call's views
keep no such list, and the history holds it exactly, for the current run of the workflow."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends, Request

from ringflow.api import keys
from ringflow.api.auth import require
from ringflow.api.models import FunctionCall
from ringflow.api.problems import PROBLEM_RESPONSES
from ringflow.api.temporal import call_problem, temporal
from ringflow.api.webhooks import failure_message

router = APIRouter(tags=["calls"], responses=PROBLEM_RESPONSES)


async def function_calls(client: Any, call_id: str) -> list[dict[str, Any]]:
    """Every function the call ran in its current run: the ``call_function`` updates in its
    workflow's history, with their arguments, result and how long each took."""
    from temporalio.api.enums.v1 import EventType

    from ringflow.workflows.client import CallHandle

    handle = CallHandle(client, call_id).handle
    pending: dict[str, tuple[dict[str, Any], datetime]] = {}
    rows: list[dict[str, Any]] = []
    async for ev in handle.fetch_history_events():
        when = ev.event_time.ToDatetime(tzinfo=UTC)
        if ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            req = ev.workflow_execution_update_accepted_event_attributes.accepted_request
            if req.input.name != "call_function":
                continue
            args = await client.data_converter.decode(list(req.input.args.payloads), [dict])
            asked = (args[0] if args else None) or {}
            row = {
                "name": asked.get("name", "?"),
                "node": asked.get("node", "?"),
                "args": asked.get("args") or {},
            }
            row["at"] = when.isoformat()
            pending[req.meta.update_id] = (row, when)
            rows.append(row)
        elif ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
            done = ev.workflow_execution_update_completed_event_attributes
            if (found := pending.get(done.meta.update_id)) is None:
                continue
            row, began = found
            row["duration_ms"] = round((when - began).total_seconds() * 1000, 1)
            if done.outcome.HasField("failure"):
                row.update(error=True, result=await failure_message(client, done.outcome.failure))
                continue
            got = await client.data_converter.decode(list(done.outcome.success.payloads), [dict])
            answer = (got[0] if got else None) or {}
            row.update(
                result=answer.get("result"),
                error=bool(answer.get("error")),
                decision=answer.get("decision"),
                to_node=answer.get("node"),
            )
    return rows


@router.get(
    "/v1/calls/{call_id}/functions", response_model=list[FunctionCall], summary="A call's function calls"
)
async def functions(request: Request, call_id: str, _: keys.KeyInfo = Depends(require("calls:read"))) -> Any:
    """Each function the call ran (this run of its workflow): arguments, result, timing."""
    from temporalio.service import RPCError

    from ringflow.api.calls import call_id_of

    try:
        rows = await function_calls(await temporal(request), call_id_of(call_id))
    except RPCError as exc:
        raise call_problem(call_id, exc) from None
    return [FunctionCall(**r) for r in rows]
