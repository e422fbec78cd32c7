"""``/v1/calls``: start, list, read, transcript and hang up calls, through the same pieces as
``ringflow call start|list|show|hangup`` (``ringflow/calls.py``, ``workflows/client.py``)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse

from ringflow.api import keys
from ringflow.api.auth import require
from ringflow.api.idempotency import IdempotencyKey, derived_id, once
from ringflow.api.models import Accepted, Call, CallPage, CallStarted, CallSummary, StartCall, Transcript
from ringflow.api.problems import PROBLEM_RESPONSES, ProblemError, field, issues_problem
from ringflow.api.temporal import temporal
from ringflow.calls import CallFilter, CallNotFound, NoWorkerAnswered, page_calls, read_call
from ringflow.contract.ids import CALL_WORKFLOW_PREFIX, call_workflow_id

router = APIRouter(prefix="/v1/calls", tags=["calls"], responses=PROBLEM_RESPONSES)


def call_id_of(raw: str) -> str:
    call_id = raw.removeprefix(CALL_WORKFLOW_PREFIX)
    if not call_id or len(call_id) > 128 or not all(c.isalnum() or c in "._:-" for c in call_id):
        raise ProblemError(404, f"no call '{raw}'", errors=[field("path.call_id", "not a call id")])
    return call_id


@router.post("", status_code=201, response_model=CallStarted, summary="Start a call")
async def start(
    request: Request,
    body: StartCall,
    key: keys.KeyInfo = Depends(require("calls:write")),
    idempotency_key: str | None = IdempotencyKey,
) -> JSONResponse:
    """Start a call of a flow: a file under ``RINGFLOW_FLOWS_DIR`` (published on the fly),
    ``NAME``, ``NAME@VERSION`` or ``NAME@CHANNEL``; the call keeps the version it starts with.
    With ``dial`` the call rings that number, without it an agent attaches as with ``call start``."""

    async def make() -> tuple[int, Any]:
        from temporalio.exceptions import WorkflowAlreadyStartedError
        from temporalio.service import RPCError

        from ringflow.callflow.errors import FlowError
        from ringflow.workflows.client import new_call_id, start_call

        settings = request.app.state.settings
        # the id first: a reference is resolved for the call it starts
        call_id = derived_id(key, idempotency_key) if idempotency_key else new_call_id()
        definition, version = await published(settings, body.flow, call_id=call_id)
        fields: dict[str, Any] = {"campaign_id": body.campaign, "direction": body.direction}
        if body.dial is not None:
            dial = body.dial.to_dial()
            fields["dial"] = dial.model_copy(
                update={
                    "trunk_id": dial.trunk_id or settings.sip_trunk_id,
                    "from_number": dial.from_number or settings.sip_from,
                    "ringing_timeout_s": dial.ringing_timeout_s or settings.sip_ringing_timeout_s,
                }
            )
            if not fields["dial"].trunk_id:
                raise ProblemError(
                    422,
                    "no SIP trunk: give dial.trunk_id or set RINGFLOW_SIP_TRUNK_ID on the API",
                    errors=[field("dial.trunk_id", "required: the API has no RINGFLOW_SIP_TRUNK_ID")],
                )
        client = await temporal(request)
        try:
            handle = await start_call(
                client,
                definition,
                task_queue=settings.task_queue,
                agent_timeout_s=settings.call_agent_timeout_s,
                call_id=call_id,
                variables=body.variables,
                flow_ref=version.ref,
                **fields,
            )
            started = handle.call_id
        except FlowError as exc:
            raise issues_problem(422, "the call's input is invalid", exc.errors, "variables") from None
        except WorkflowAlreadyStartedError:  # only a derived id meets an existing call
            started = call_id
        except RPCError as exc:
            raise ProblemError(503, f"Temporal refused the call: {exc.message}") from None
        answer = CallStarted(
            id=started,
            workflow_id=call_workflow_id(started),
            flow=definition.flow.flow,
            version=definition.flow.version,
            flow_ref=f"{version.name}@{version.version}",
        )
        return 201, answer.model_dump(mode="json")

    return await once(request, key, idempotency_key, body.model_dump(mode="json"), make)


async def published(
    settings: Any, ref: str, where: str = "flow", call_id: str | None = None
) -> tuple[Any, Any]:
    """The definition and published version a request's flow reference names
    (``ringflow/flow_refs.py``; with ``call_id``, a channel's running canary picks the side),
    or a 422 naming the field ``where``."""
    from ringflow.callflow.errors import FlowError
    from ringflow.flow_refs import FlowRefError, load_ref

    try:
        return await asyncio.to_thread(load_ref, ref, settings.database_url, settings.flows_dir, call_id)
    except FlowRefError as exc:
        raise ProblemError(422, str(exc), errors=[field(where, str(exc))]) from None
    except FlowError as exc:
        raise issues_problem(422, f"flow '{ref[:300]}' is invalid", exc.errors, where) from None


def _cursor(query: str, token: bytes | None) -> str | None:
    if token is None:
        return None
    tag = hashlib.sha256(query.encode()).hexdigest()[:12]
    raw = json.dumps({"q": tag, "t": base64.b64encode(token).decode()}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _token(query: str, cursor: str | None) -> bytes | None:
    if not cursor:
        return None
    bad = ProblemError(400, "the cursor is not one this list gave", errors=[field("query.cursor", "invalid")])
    try:
        raw = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        tag, token = raw["q"], base64.b64decode(raw["t"], validate=True)
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise bad from None
    if tag != hashlib.sha256(query.encode()).hexdigest()[:12]:
        raise ProblemError(
            400,
            "the cursor belongs to a list with other filters",
            errors=[field("query.cursor", "filters changed since this cursor was given")],
        )
    return bytes(token)


@router.get("", response_model=CallPage, summary="List calls")
async def list_calls(
    request: Request,
    _: keys.KeyInfo = Depends(require("calls:read")),
    status: Literal["dialing", "live", "ended", "takeover"] | None = None,
    flow: str | None = Query(None, max_length=100),
    node: str | None = Query(None, max_length=100),
    disposition: str | None = Query(None, max_length=100),
    campaign: str | None = Query(None, max_length=128),
    started_after: datetime | None = None,
    started_before: datetime | None = None,
    limit: int = Query(50, ge=1, le=1000),
    cursor: str | None = Query(None, max_length=4096),
) -> CallPage:
    """Calls by their search attributes (Temporal visibility), newest first, a page at a time:
    the cursor keeps its place while new calls start."""
    query = CallFilter(
        status=status,
        node=node,
        flow=flow,
        disposition=disposition,
        campaign=campaign,
        started_after=started_after,
        started_before=started_before,
    ).query()
    token = _token(query, cursor)
    client = await temporal(request)
    from temporalio.service import RPCError

    try:
        rows, nxt = await page_calls(client, query, limit, token)
    except RPCError as exc:
        raise ProblemError(
            400 if token else 503,
            f"Temporal refused the list: {exc.message}",
            errors=[field("query.cursor", exc.message)] if token else [],
        ) from None
    return CallPage(
        data=[CallSummary(id=r["call_id"], **{k: v for k, v in r.items() if k != "call_id"}) for r in rows],
        next_cursor=_cursor(query, nxt),
    )


async def read(request: Request, raw: str) -> tuple[Any, list[dict[str, Any]]]:
    """The call and its transcript (``ringflow.calls.read_call``), its failures as problems."""
    from temporalio.service import RPCError

    call_id = call_id_of(raw)
    settings = request.app.state.settings
    try:
        return await read_call(await temporal(request), call_id, settings.database_url, settings.redis_url)
    except CallNotFound:
        raise ProblemError(
            404, f"no call '{call_id}'", errors=[field("path.call_id", "no such call")]
        ) from None
    except NoWorkerAnswered as exc:
        raise ProblemError(504, str(exc)) from None
    except RPCError as exc:
        raise ProblemError(503, f"call {call_id}: {exc.message}") from None


def call_document(call: Any) -> dict[str, Any]:
    """A call as ``call show --json`` prints it, with its ``id`` and whether it is live."""
    from ringflow.contract.call import CallView

    shown = call.model_dump(mode="json")
    shown.pop("transcript", None)  # an ended call's record: its own route gives the transcript
    return {
        "id": shown["call_id"],
        **shown,
        "live": isinstance(call, CallView) and shown["status"] != "ended",
    }


@router.get("/{call_id}", response_model=Call, summary="Get a call")
async def get_call(request: Request, call_id: str, _: keys.KeyInfo = Depends(require("calls:read"))) -> Any:
    """The call's state: from its running workflow while it talks, from its record once ended."""
    call, _turns = await read(request, call_id)
    return JSONResponse(call_document(call))


@router.get("/{call_id}/transcript", response_model=Transcript, summary="A call's transcript")
async def transcript(request: Request, call_id: str, _: keys.KeyInfo = Depends(require("calls:read"))) -> Any:
    """Every turn with the node it was said on; turns the agent still holds are marked ``held``."""
    call, turns = await read(request, call_id)
    return JSONResponse({"id": call.call_id, "turns": turns})


@router.post("/{call_id}/hangup", status_code=202, response_model=Accepted, summary="Hang up a call")
async def hangup(
    request: Request,
    call_id: str,
    key: keys.KeyInfo = Depends(require("calls:write")),
    idempotency_key: str | None = IdempotencyKey,
) -> JSONResponse:
    """End the call as if the caller hung up (the same as ``ringflow call hangup``)."""
    from temporalio.service import RPCError, RPCStatusCode

    from ringflow.workflows.client import CallHandle

    cid = call_id_of(call_id)

    async def make() -> tuple[int, Any]:
        handle = CallHandle(await temporal(request), cid)
        try:
            await handle.hangup("user_hangup", event_id=f"api-{idempotency_key}" if idempotency_key else None)
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                if "completed" in exc.message or "finished" in exc.message:
                    raise ProblemError(409, f"call {cid} has already ended") from None
                raise ProblemError(
                    404, f"no call '{cid}'", errors=[field("path.call_id", "no such call")]
                ) from None
            raise ProblemError(503, f"call {cid}: {exc.message}") from None
        return 202, Accepted(id=cid, result="hangup sent").model_dump(mode="json")

    return await once(request, key, idempotency_key, {}, make)
