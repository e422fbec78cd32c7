"""``/v1/calls/{id}/listen|whisper|takeover|handback``: supervisors on a live call, through
the same pieces as ``ringflow call listen|whisper|takeover|handback``
(``ringflow/supervisors.py``). Each action is recorded by the call's workflow; a refusal
is a 409 with the workflow's reason, as the CLI prints it."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from ringflow.api import keys
from ringflow.api.auth import require
from ringflow.api.calls import call_id_of
from ringflow.api.idempotency import IdempotencyKey, once
from ringflow.api.models import (
    HandbackIn,
    Listen,
    ListenIn,
    Supervised,
    TakenOver,
    TakeoverIn,
    Voice,
    WhisperIn,
)
from ringflow.api.problems import PROBLEM_RESPONSES, ProblemError, field
from ringflow.api.temporal import temporal

if TYPE_CHECKING:
    from ringflow.contract.supervision import SupervisorRequest

router = APIRouter(prefix="/v1/calls", tags=["supervisors"], responses=PROBLEM_RESPONSES)
SCOPE = "calls:supervise"


def supervisor_name(key: keys.KeyInfo, by: str | None) -> str:
    """Who acts, for the call's record: the request's ``by``, else the API key's name (its
    id when it has none)."""
    from ringflow.contract.wire import MAX_ID_CHARS

    return (by or key.name or f"key {key.id}")[:MAX_ID_CHARS]


def not_found(call_id: str) -> ProblemError:
    return ProblemError(404, f"no call '{call_id}'", errors=[field("path.call_id", "no such call")])


async def act(request: Request, call_id: str, action: str, **fields: Any) -> dict[str, Any]:
    """Send the action and answer what the workflow recorded (``Supervised``); refusals as
    problems: 404 no such call, 409 the workflow's reason, 504 no worker answered."""
    from ringflow.supervisors import supervise

    req = request_of(action, **fields)
    with refusals(call_id):
        redis_url = request.app.state.settings.redis_url
        answer = await supervise(await temporal(request), call_id, req, redis_url=redis_url)
    out = Supervised(
        call_id=call_id, takeover=answer.supervision.takeover, **answer.step.model_dump(mode="json")
    )
    return out.model_dump(mode="json")


@contextlib.contextmanager
def refusals(call_id: str) -> Iterator[None]:
    """The call's refusals as problems: 404 no such call, 409 the workflow's reason, 504 no
    worker answered."""
    from ringflow.supervisors import CallNotFound, NoWorkerAnswered, SupervisionRefused

    try:
        yield
    except CallNotFound:
        raise not_found(call_id) from None
    except SupervisionRefused as exc:
        raise ProblemError(409, f"call {call_id}: {exc}") from None
    except NoWorkerAnswered as exc:
        raise ProblemError(504, str(exc)) from None


def request_of(action: str, **fields: Any) -> SupervisorRequest:
    """The action as the workflow takes it; a bad field is a 422 naming it."""
    from pydantic import ValidationError

    from ringflow.contract.supervision import SupervisorRequest

    try:
        return SupervisorRequest.model_validate({"action": action, **fields})
    except ValidationError as exc:  # the body's own model checks the same bounds first
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ProblemError(422, f"{where}: {first['msg']}", errors=[field(where, first["msg"])]) from None


ANSWERS: dict[int | str, dict[str, Any]] = {
    409: {"description": "Refused by the call: the workflow's reason (not live yet, ended, ...)."}
}


@router.post("/{call_id}/whisper", response_model=Supervised, responses=ANSWERS, summary="Whisper to the bot")
async def whisper(
    request: Request,
    call_id: str,
    body: WhisperIn,
    key: keys.KeyInfo = Depends(require(SCOPE)),
    idempotency_key: str | None = IdempotencyKey,
) -> JSONResponse:
    """A hint into the bot's LLM context for its next turn, never said to the caller."""
    cid = call_id_of(call_id)

    async def make() -> tuple[int, Any]:
        return 200, await act(request, cid, "whisper", text=body.text, by=supervisor_name(key, body.by))

    return await once(request, key, idempotency_key, body.model_dump(mode="json"), make)


@router.post("/{call_id}/takeover", response_model=TakenOver, responses=ANSWERS, summary="Take a call over")
async def takeover(
    request: Request,
    call_id: str,
    body: TakeoverIn | None = None,
    key: keys.KeyInfo = Depends(require(SCOPE)),
    idempotency_key: str | None = IdempotencyKey,
) -> JSONResponse:
    """The bot stops speaking and listening, the flow's timers pause, and the call shows as
    ``status=takeover`` until it is handed back. ``voice`` is the LiveKit token the supervisor
    speaks to the caller with (a microphone only; ``identity`` and ``ttl_s`` as for
    ``/listen``): what they say is kept in the call's transcript as ``supervisor`` turns."""
    from ringflow.supervisors import takeover as take_over

    cid = call_id_of(call_id)
    body = body or TakeoverIn()

    async def make() -> tuple[int, Any]:
        req = request_of("takeover", by=supervisor_name(key, body.by))
        who = body.identity or f"supervisor-{uuid.uuid4().hex[:8]}"
        settings = request.app.state.settings
        with refusals(cid):
            answer, grant = await take_over(await temporal(request), settings, cid, req, who, body.ttl_s)
        voice = (
            Voice(room=grant.room, identity=who, url=grant.url, token=grant.token, ttl_s=grant.ttl_s)
            if grant is not None
            else None
        )
        out = TakenOver(
            call_id=cid,
            takeover=answer.supervision.takeover,
            voice=voice,
            **answer.step.model_dump(mode="json"),
        )
        return 200, out.model_dump(mode="json")

    return await once(request, key, idempotency_key, body.model_dump(mode="json"), make)


@router.post("/{call_id}/handback", response_model=Supervised, responses=ANSWERS, summary="Hand a call back")
async def handback(
    request: Request,
    call_id: str,
    body: HandbackIn | None = None,
    key: keys.KeyInfo = Depends(require(SCOPE)),
    idempotency_key: str | None = IdempotencyKey,
) -> JSONResponse:
    """Give the call back to the bot at ``node`` (or where it was), with the supervisor's part
    of the conversation in its context and the flow's state as it was."""
    cid = call_id_of(call_id)
    body = body or HandbackIn()

    async def make() -> tuple[int, Any]:
        return 200, await act(request, cid, "handback", node=body.node, by=supervisor_name(key, body.by))

    return await once(request, key, idempotency_key, body.model_dump(mode="json"), make)


@router.post("/{call_id}/listen", response_model=Listen, responses=ANSWERS, summary="Listen to a call")
async def listen(
    request: Request,
    call_id: str,
    body: ListenIn | None = None,
    key: keys.KeyInfo = Depends(require(SCOPE)),
    idempotency_key: str | None = IdempotencyKey,
) -> JSONResponse:
    """A LiveKit token (with LiveKit's URL and its lifetime) to join the live call's room
    hidden and subscribe-only: the caller is not told, the bot's audio goes on without a gap,
    the supervisor cannot be heard. 503 when the API has no LiveKit credentials."""
    from ringflow.supervisors import (
        CallNotFound,
        NoLiveKit,
        NoWorkerAnswered,
        SupervisionRefused,
        listen_grant,
    )

    cid = call_id_of(call_id)
    body = body or ListenIn()

    async def make() -> tuple[int, Any]:
        who = body.identity or f"supervisor-{uuid.uuid4().hex[:8]}"
        try:
            grant = await listen_grant(
                await temporal(request), request.app.state.settings, cid, who, body.ttl_s
            )
        except NoLiveKit as exc:
            raise ProblemError(503, str(exc)) from None
        except CallNotFound:
            raise not_found(cid) from None
        except SupervisionRefused as exc:
            raise ProblemError(409, f"call {cid}: {exc.reason}") from None
        except NoWorkerAnswered as exc:
            raise ProblemError(504, str(exc)) from None
        out = Listen(
            id=cid, room=grant.room, identity=who, url=grant.url, token=grant.token, ttl_s=grant.ttl_s
        )
        return 200, out.model_dump(mode="json")

    return await once(request, key, idempotency_key, body.model_dump(mode="json"), make)
