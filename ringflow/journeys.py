"""Listing, reading and cancelling journeys: what ``ringflow journey list|show|cancel``, the
HTTP API and the console share, so the three answer the same for the same journey.

A list is a visibility query over ``RingflowJourney``'s workflows by flow and status (no
worker needed); a journey is read from its workflow's ``state`` query, which gives its
calls on one timeline (``contract/journey.py``, ``JourneyView``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ringflow.calls import NoWorkerAnswered, quote

if TYPE_CHECKING:
    from temporalio.client import Client

    from ringflow.contract.journey import JourneyView

JOURNEY_STATUSES = ("calling", "scheduled", "open", "ended")


class JourneyNotFound(LookupError):
    """No journey of that id (Temporal has no such workflow)."""


class JourneyEnded(Exception):
    """The journey has ended already: there is nothing to cancel."""


def journey_query(flow: str | None = None, status: str | None = None) -> str:
    """The visibility query of journeys, of ``flow`` and in ``status`` when given."""
    from ringflow.activities.search_attributes import RINGFLOW_FLOW, RINGFLOW_STATUS
    from ringflow.contract.journey import JOURNEY_WORKFLOW

    query = f"WorkflowType = {quote(JOURNEY_WORKFLOW)}"
    for attr, value in ((RINGFLOW_FLOW, flow), (RINGFLOW_STATUS, status)):
        if value is not None:
            query += f" AND {attr.name} = {quote(value)}"
    return query


async def list_journeys(
    client: Client, flow: str | None = None, status: str | None = None, limit: int = 50
) -> list[dict[str, Any]]:
    """Up to ``limit`` journeys, newest first, as ``ringflow journey list --json`` prints them."""
    from ringflow.listing import workflow_rows

    return await workflow_rows(client, journey_query(flow, status), limit, id_key="journey_id")


async def read_journey(client: Client, journey_id: str, *, timeout_s: float = 15) -> JourneyView:
    """The journey's state and calls. Raises :class:`JourneyNotFound`,
    :class:`NoWorkerAnswered` and (its payloads under a key not here) ``CodecKeyError``."""
    from temporalio.service import RPCError, RPCStatusCode

    from ringflow.workflows.journey_client import JourneyHandle

    try:
        return await asyncio.wait_for(JourneyHandle(client, journey_id).state(), timeout_s)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise JourneyNotFound(f"no journey '{journey_id}'") from None
        raise
    except TimeoutError:
        raise NoWorkerAnswered(
            f"journey {journey_id}: no worker answered the query (is `ringflow worker` running?)"
        ) from None


async def cancel_journey(client: Client, journey_id: str) -> JourneyView:
    """No further call of the journey (a call live now finishes as it would, never cut):
    the journey as it was asked. Raises :class:`JourneyNotFound`, :class:`JourneyEnded`."""
    from temporalio.service import RPCError, RPCStatusCode

    from ringflow.workflows.journey_client import JourneyHandle

    view = await read_journey(client, journey_id)
    if view.status == "ended":
        raise JourneyEnded(f"journey {journey_id} has ended already ({view.end})")
    try:
        await JourneyHandle(client, journey_id).end("cancelled")
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:  # it closed between the read and the signal
            raise JourneyEnded(f"journey {journey_id} has ended already") from None
        raise
    return view
