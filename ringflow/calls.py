"""Listing and reading calls: what ``ringflow call list|show`` and the HTTP API (``ringflow api``)
share, so the two answer the same for the same call.

A list is a Temporal visibility query over Ringflow's search attributes (it needs no worker);
a call is read from its workflow's result once it ended (a simulated call's worker is gone
by then), otherwise from the workflow's ``state`` query, plus the turns its agent still
holds (``ringflow/live_transcript.py``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ringflow.contract.ids import CALL_WORKFLOW_PREFIX

if TYPE_CHECKING:
    from temporalio.client import Client, WorkflowExecution

    from ringflow.contract.call import CallView
    from ringflow.contract.records import CallRecord
    from ringflow.workflows.client import CallHandle

STATUSES = ("dialing", "live", "ended", "takeover")


class CallNotFound(LookupError):
    """No call of that id (Temporal has no workflow ``call-<id>``)."""


class NoWorkerAnswered(TimeoutError):
    """A running call whose workflow no worker answered the query for."""


def quote(value: str) -> str:
    """A string literal in Temporal's visibility query language."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass(frozen=True)
class CallFilter:
    """What ``call list`` and ``GET /v1/calls`` filter on: each a search attribute (or the
    workflow's start time), all of them together."""

    status: str | None = None
    node: str | None = None
    flow: str | None = None
    disposition: str | None = None
    campaign: str | None = None
    started_after: datetime | None = None
    started_before: datetime | None = None

    def query(self) -> str:
        from ringflow.activities import search_attributes as attrs

        parts = ["WorkflowType = 'CallWorkflow'"]
        for attr, value in (
            (attrs.RINGFLOW_STATUS, self.status),
            (attrs.RINGFLOW_NODE, self.node),
            (attrs.RINGFLOW_FLOW, self.flow),
            (attrs.RINGFLOW_DISPOSITION, self.disposition),
            (attrs.RINGFLOW_CAMPAIGN, self.campaign),
        ):
            if value:
                parts.append(f"{attr.name} = {quote(value)}")
        if self.started_after is not None:
            parts.append(f"StartTime >= {quote(self.started_after.isoformat())}")
        if self.started_before is not None:
            parts.append(f"StartTime < {quote(self.started_before.isoformat())}")
        return " AND ".join(parts)


def visibility_query(status: str | None, node: str | None, flow: str | None) -> str:
    return CallFilter(status=status, node=node, flow=flow).query()


def call_row(wf: WorkflowExecution) -> dict[str, Any]:
    """One call as a list shows it: its search attributes, no query to its workflow."""
    from ringflow.activities import search_attributes as attrs

    sa = wf.typed_search_attributes
    return {
        "call_id": wf.id.removeprefix(CALL_WORKFLOW_PREFIX),
        "workflow_id": wf.id,
        "status": sa.get(attrs.RINGFLOW_STATUS),
        "node": sa.get(attrs.RINGFLOW_NODE),
        "flow": sa.get(attrs.RINGFLOW_FLOW),
        "campaign": sa.get(attrs.RINGFLOW_CAMPAIGN),
        "transitions": sa.get(attrs.RINGFLOW_TRANSITIONS),
        "disposition": sa.get(attrs.RINGFLOW_DISPOSITION),
        "end_reason": sa.get(attrs.RINGFLOW_END_REASON),
        "started": wf.start_time.isoformat() if wf.start_time else None,
        "closed": wf.close_time.isoformat() if wf.close_time else None,
    }


async def list_calls(client: Client, query: str, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` calls matching ``query``, newest first."""
    return [call_row(wf) async for wf in client.list_workflows(query, limit=limit)]


async def page_calls(
    client: Client, query: str, page_size: int, token: bytes | None
) -> tuple[list[dict[str, Any]], bytes | None]:
    """One page of calls and the token of the next (None after the last): Temporal's own
    visibility cursor, which keeps its place while new calls start."""
    it = client.list_workflows(query, page_size=page_size, next_page_token=token)
    await it.fetch_next_page(page_size=page_size)
    rows = [call_row(wf) for wf in it.current_page or []]
    return rows, it.next_page_token or None


async def read_call(
    client: Client, call_id: str, database_url: str, redis_url: str | None, *, timeout_s: float = 15
) -> tuple[CallView | CallRecord, list[dict[str, Any]]]:
    """The call and its transcript, as ``call show`` prints them: an ended call from its
    record (and the database for a long call's transcript), a running one from its
    workflow's query and the turns its agent still holds. Raises :class:`CallNotFound` and
    :class:`NoWorkerAnswered`."""
    from temporalio.service import RPCError, RPCStatusCode

    from ringflow.live_transcript import held_turns
    from ringflow.workflows.client import CallHandle

    call = CallHandle(client, call_id.removeprefix(CALL_WORKFLOW_PREFIX))
    try:
        if (closed := await _closed_call(call, database_url)) is not None:
            return closed
        state = await asyncio.wait_for(call.state(), timeout_s)
        transcript = [t.model_dump() for t in await call.transcript(database_url)]
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise CallNotFound(f"call {call.call_id}: {exc.message}") from None
        raise
    except TimeoutError:
        raise NoWorkerAnswered(
            f"call {call.call_id}: no worker answered the query (is `ringflow worker` running?)"
        ) from None
    transcript += await held_turns(redis_url, call.call_id, state.next_seq)
    return state, transcript


async def _closed_call(call: CallHandle, database_url: str) -> tuple[CallRecord, list[dict[str, Any]]] | None:
    """An ended call read from its workflow's result, which needs no worker: the worker of a
    simulated call (its own task queue) is gone once the simulation ends. None while the
    call runs, or when it ended without a record (terminated): then the query decides.
    A record without its transcript (a long call's) points at the database for it."""
    from temporalio.client import WorkflowExecutionStatus

    desc = await call.handle.describe()
    if desc.status != WorkflowExecutionStatus.COMPLETED:
        return None
    record = await call.handle.result()
    transcript = record.transcript
    record = record.model_copy(update={"transcript": []})
    local = database_url.removeprefix("sqlite:///") if database_url.startswith("sqlite:///") else None
    if not transcript and (local is None or Path(local).exists()):  # a missing SQLite file holds nothing
        from ringflow.activities.persistence import load_transcript

        try:
            stored = load_transcript(call.call_id, database_url=database_url)
        except Exception:  # no database here: ask the workflow instead
            return None
        transcript = [{"role": t.role, "node": t.node, "text": t.text} for t in stored]
    return record, transcript
