"""``/v1/journeys``: list, read and cancel journeys (one person's calls of one flow), through
the same pieces as ``ringflow journey list|show|cancel`` (``ringflow/journeys.py``)."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse

from ringflow.api import keys
from ringflow.api.auth import require
from ringflow.api.idempotency import IdempotencyKey, once
from ringflow.api.models import Journey, JourneyCancelled, JourneyPage, JourneySummary
from ringflow.api.problems import PROBLEM_RESPONSES, ProblemError, field
from ringflow.api.temporal import temporal

router = APIRouter(prefix="/v1/journeys", tags=["journeys"], responses=PROBLEM_RESPONSES)


def journey_id_of(raw: str) -> str:
    if not raw or len(raw) > 200 or not all(c.isalnum() or c in "._:-" for c in raw):
        raise ProblemError(
            404, f"no journey '{raw[:200]}'", errors=[field("path.journey_id", "not a journey id")]
        )
    return raw


def journey_problem(journey_id: str, exc: Exception) -> ProblemError:
    """What reading or cancelling a journey met, as a problem."""
    from temporalio.service import RPCError

    from ringflow.codec import CodecKeyError
    from ringflow.journeys import JourneyEnded, JourneyNotFound, NoWorkerAnswered

    if isinstance(exc, JourneyNotFound):
        return ProblemError(404, str(exc), errors=[field("path.journey_id", "no such journey")])
    if isinstance(exc, JourneyEnded):
        return ProblemError(409, str(exc))
    if isinstance(exc, NoWorkerAnswered):
        return ProblemError(504, str(exc))
    if isinstance(exc, (RPCError, CodecKeyError)):
        return ProblemError(503, f"journey {journey_id}: {getattr(exc, 'message', exc)}")
    raise exc


async def read(request: Request, journey_id: str) -> Any:
    from ringflow.journeys import read_journey

    try:
        return await read_journey(await temporal(request), journey_id)
    except Exception as exc:
        raise journey_problem(journey_id, exc) from None


def journey_document(view: Any) -> dict[str, Any]:
    return Journey(id=view.journey_id, **view.model_dump(mode="json")).model_dump(mode="json")


@router.get("", response_model=JourneyPage, summary="List journeys")
async def list_journeys(
    request: Request,
    _: keys.KeyInfo = Depends(require("journeys:read")),
    flow: str | None = Query(None, max_length=100),
    status: Literal["calling", "scheduled", "open", "ended"] | None = None,
    limit: int = Query(50, ge=1, le=1000),
) -> JourneyPage:
    """Journeys by their search attributes (``RingflowFlow``, ``RingflowStatus``), newest
    first, as ``ringflow journey list`` lists them."""
    from temporalio.service import RPCError

    from ringflow.journeys import list_journeys as journeys_of

    try:
        rows = await journeys_of(await temporal(request), flow, status, limit)
    except RPCError as exc:
        raise ProblemError(503, f"Temporal refused the list: {exc.message}") from None
    return JourneyPage(
        data=[
            JourneySummary(id=r["journey_id"], **{k: v for k, v in r.items() if k != "journey_id"})
            for r in rows
        ]
    )


@router.get("/{journey_id}", response_model=Journey, summary="Get a journey")
async def get_journey(
    request: Request, journey_id: str, _: keys.KeyInfo = Depends(require("journeys:read"))
) -> JSONResponse:
    """The journey's calls on one timeline (each with its id, for ``GET /v1/calls/{id}``),
    the call live now, the next call due, its state and values."""
    view = await read(request, journey_id_of(journey_id))
    return JSONResponse(journey_document(view))


@router.post(
    "/{journey_id}/cancel", status_code=202, response_model=JourneyCancelled, summary="Cancel a journey"
)
async def cancel(
    request: Request,
    journey_id: str,
    key: keys.KeyInfo = Depends(require("journeys:write")),
    idempotency_key: str | None = IdempotencyKey,
) -> JSONResponse:
    """No further call of the journey; a call live now finishes as it would (never cut).
    409 once the journey has ended."""
    from ringflow.journeys import cancel_journey

    jid = journey_id_of(journey_id)

    async def make() -> tuple[int, Any]:
        try:
            await cancel_journey(await temporal(request), jid)
        except Exception as exc:
            raise journey_problem(jid, exc) from None
        return 202, JourneyCancelled(id=jid).model_dump(mode="json")

    return await once(request, key, idempotency_key, {}, make)
