"""``/v1/campaigns``: create a campaign from an uploaded CSV or JSONL with the CLI's options,
read its progress, steer it and take its report, through ``ringflow/campaigns.py`` (what
``ringflow campaign ...`` uses)."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from pathlib import PurePosixPath
from typing import Any

from fastapi import APIRouter, Depends, File, Form, Query, Request, UploadFile
from fastapi.responses import JSONResponse, Response

from ringflow.api import keys
from ringflow.api.auth import require
from ringflow.api.calls import published
from ringflow.api.idempotency import IdempotencyKey, derived_id, once
from ringflow.api.models import (
    FLOW_REF,
    Accepted,
    CampaignProgress,
    CampaignStarted,
    CampaignSummary,
    LimitsIn,
    ReportRow,
)
from ringflow.api.problems import PROBLEM_RESPONSES, ProblemError, field
from ringflow.api.temporal import temporal
from ringflow.contract.ids import CAMPAIGN_WORKFLOW_PREFIX, campaign_workflow_id

router = APIRouter(prefix="/v1/campaigns", tags=["campaigns"], responses=PROBLEM_RESPONSES)
MAX_UPLOAD_BYTES = 20 * 1024 * 1024


def _campaign_id(raw: str) -> str:
    cid = raw.removeprefix(CAMPAIGN_WORKFLOW_PREFIX)
    if not cid or len(cid) > 128 or not all(c.isalnum() or c in "._:-" for c in cid):
        raise ProblemError(
            404, f"no campaign '{raw}'", errors=[field("path.campaign_id", "not a campaign id")]
        )
    return cid


async def _upload(upload: UploadFile, name: str) -> bytes:
    raw = await upload.read(MAX_UPLOAD_BYTES + 1)
    if len(raw) > MAX_UPLOAD_BYTES:
        raise ProblemError(413, f"{name} over {MAX_UPLOAD_BYTES} bytes", errors=[field(name, "too large")])
    return raw


def _text(raw: bytes, name: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProblemError(
            422, f"{name}: not UTF-8 text (byte {exc.start})", errors=[field(name, "not UTF-8")]
        ) from None


@router.post("", status_code=201, response_model=CampaignStarted, summary="Create a campaign")
async def create(
    request: Request,
    contacts: UploadFile = File(description="CSV (phone, timezone, variables...) or JSONL (`.jsonl`)."),
    flow: str = Form(min_length=1, max_length=300, description=FLOW_REF),
    trunk: str | None = Form(None, max_length=128),
    from_number: str | None = Form(None, max_length=64),
    max_concurrent: int = Form(10, ge=1, le=10_000),
    cps: float = Form(1.0, gt=0, le=1000),
    max_attempts: int = Form(3, ge=1, le=100),
    window: list[str] = Form(["Mon-Fri 09:00-20:00"]),
    skip_date: list[str] = Form([]),
    retry: list[str] = Form([]),
    default_timezone: str | None = Form(None, max_length=64),
    dnc: UploadFile | None = File(None, description="Do-not-call numbers to add (one a line)."),
    campaign_id: str | None = Form(None, max_length=64, pattern=r"^[A-Za-z0-9._:-]+$"),
    key: keys.KeyInfo = Depends(require("campaigns:write")),
    idempotency_key: str | None = IdempotencyKey,
) -> JSONResponse:
    """The same options as ``ringflow campaign start``; every bad contact line is named."""
    raw = await _upload(contacts, "contacts")
    dnc_raw = await _upload(dnc, "dnc") if dnc is not None else b""
    name = PurePosixPath(contacts.filename or "contacts.csv").name
    fields = {
        "flow": flow,
        "trunk": trunk,
        "from_number": from_number,
        "max_concurrent": max_concurrent,
        "cps": cps,
        "max_attempts": max_attempts,
        "window": window,
        "skip_date": skip_date,
        "retry": retry,
        "default_timezone": default_timezone,
        "campaign_id": campaign_id,
        "contacts": hashlib.sha256(raw).hexdigest(),
        "dnc": hashlib.sha256(dnc_raw).hexdigest(),
    }

    async def make() -> tuple[int, Any]:
        from pathlib import Path

        from pydantic import ValidationError
        from temporalio.exceptions import WorkflowAlreadyStartedError
        from temporalio.service import RPCError

        from ringflow.activities.campaign_rules import RuleError, parse_retry, parse_windows
        from ringflow.campaigns import (
            ContactsError,
            campaign_input,
            parse_contacts,
            parse_dnc,
            start_campaign,
        )

        settings = request.app.state.settings
        try:
            windows = parse_windows(window, skip_date)
        except RuleError as exc:
            raise ProblemError(422, str(exc), errors=[field("window", str(exc))]) from None
        try:
            retries = dict(parse_retry(r) for r in retry)
        except RuleError as exc:
            raise ProblemError(422, str(exc), errors=[field("retry", str(exc))]) from None
        use_trunk = trunk or settings.sip_trunk_id
        if not use_trunk:
            raise ProblemError(
                422,
                "no SIP trunk: give `trunk` or set RINGFLOW_SIP_TRUNK_ID",
                errors=[field("trunk", "required")],
            )
        # the campaign pins the version: its calls and their retries keep it, whatever is promoted
        definition, version = await published(settings, flow)
        try:
            people = await asyncio.to_thread(
                parse_contacts, _text(raw, "contacts"), Path(name), definition, default_timezone
            )
        except ContactsError as exc:
            raise ProblemError(422, str(exc), errors=[field("contacts", str(exc))]) from None
        try:
            dnc_name = PurePosixPath((dnc.filename if dnc is not None else None) or "dnc.txt").name
            blocked = parse_dnc(_text(dnc_raw, "dnc"), Path(dnc_name)) if dnc_raw else []
        except ContactsError as exc:
            raise ProblemError(422, str(exc), errors=[field("dnc", str(exc))]) from None
        cid = campaign_id or (
            derived_id(key, idempotency_key)[:12] if idempotency_key else uuid.uuid4().hex[:12]
        )
        try:
            inp = await asyncio.to_thread(  # a canary on the flow's channel is read from the database
                campaign_input,
                settings,
                definition,
                cid,
                trunk=use_trunk,
                from_number=from_number,
                limits={"max_concurrent": max_concurrent, "cps": cps, "max_attempts": max_attempts},
                windows=windows,
                retries=retries,
                flow_ref=version.ref,
                ref=flow,
            )
        except ValidationError as exc:
            errors = [field(".".join(str(x) for x in e["loc"]), e["msg"]) for e in exc.errors()]
            raise ProblemError(
                422, "; ".join(f"{e.field}: {e.detail}" for e in errors), errors=errors
            ) from None
        if not settings.redis_url:
            raise ProblemError(503, "campaigns need Redis for pacing: set RINGFLOW_REDIS_URL on the API")
        client = await temporal(request)
        try:
            await start_campaign(
                client,
                inp,
                people,
                database_url=settings.database_url,
                task_queue=settings.task_queue,
                dnc=blocked,
            )
        except WorkflowAlreadyStartedError:
            raise ProblemError(
                409, f"campaign '{cid}' exists", errors=[field("campaign_id", "already used")]
            ) from None
        except RPCError as exc:
            raise ProblemError(503, f"Temporal refused the campaign: {exc.message}") from None
        answer = CampaignStarted(
            id=cid,
            workflow_id=campaign_workflow_id(cid),
            contacts=len(people),
            flow=definition.flow.flow,
            flow_ref=f"{version.name}@{version.version}",
        )
        return 201, answer.model_dump(mode="json")

    return await once(request, key, idempotency_key, fields, make)


@router.get("", response_model=list[CampaignSummary], summary="List campaigns")
async def list_campaigns(
    request: Request,
    _: keys.KeyInfo = Depends(require("campaigns:read")),
    limit: int = Query(50, ge=1, le=1000),
) -> Any:
    from ringflow.listing import workflow_rows

    query = "WorkflowType = 'CampaignWorkflow'"
    rows = await workflow_rows(
        await temporal(request), query, limit, id_key="id", prefix=CAMPAIGN_WORKFLOW_PREFIX
    )
    return [CampaignSummary(**r) for r in rows]


async def progress(request: Request, cid: str) -> dict[str, Any]:
    from ringflow.campaigns import CampaignNotFound, campaign_progress

    settings = request.app.state.settings
    try:
        p = await campaign_progress(await temporal(request), settings.database_url, cid)
    except CampaignNotFound as exc:
        raise ProblemError(404, str(exc), errors=[field("path.campaign_id", "no such campaign")]) from None
    return {"id": p["campaign_id"], **p}


@router.get("/{campaign_id}", response_model=CampaignProgress, summary="A campaign's progress")
async def get_campaign(
    request: Request, campaign_id: str, _: keys.KeyInfo = Depends(require("campaigns:read"))
) -> Any:
    """Contacts by state, calls live now, attempts in the last minute, the next due time."""
    return JSONResponse(await progress(request, _campaign_id(campaign_id)))


async def _control(request: Request, cid: str, name: str, arg: Any = None) -> tuple[int, Any]:
    from temporalio.client import WorkflowUpdateFailedError
    from temporalio.service import RPCError

    from ringflow.campaigns import campaign_handle

    handle = campaign_handle(await temporal(request), cid)
    try:
        result = await (handle.execute_update(name) if arg is None else handle.execute_update(name, arg))
    except WorkflowUpdateFailedError as exc:
        raise ProblemError(409, f"campaign '{cid}': {exc.cause or exc}") from None
    except RPCError as exc:
        raise ProblemError(404, f"no running campaign '{cid}': {exc.message}") from None
    if hasattr(result, "model_dump"):
        result = result.model_dump(mode="json")
    return 200, Accepted(id=cid, result=result).model_dump(mode="json")


def _steer(name: str, summary: str, doc: str) -> None:
    async def route(
        request: Request,
        campaign_id: str,
        key: keys.KeyInfo = Depends(require("campaigns:write")),
        idempotency_key: str | None = IdempotencyKey,
    ) -> JSONResponse:
        cid = _campaign_id(campaign_id)
        return await once(request, key, idempotency_key, {}, lambda: _control(request, cid, name))

    route.__doc__ = doc
    router.add_api_route(
        f"/{{campaign_id}}/{name}",
        route,
        methods=["POST"],
        response_model=Accepted,
        summary=summary,
        name=name,
    )


_steer("pause", "Pause a campaign", "No new dials until resumed; live calls go on.")
_steer("resume", "Resume a campaign", "Dial again, in the calling windows.")
_steer("cancel", "Cancel a campaign", "No new dials; the calls live now finish as they would.")


@router.post("/{campaign_id}/limits", response_model=Accepted, summary="Change a campaign's limits")
async def limits(
    request: Request,
    campaign_id: str,
    body: LimitsIn,
    key: keys.KeyInfo = Depends(require("campaigns:write")),
    idempotency_key: str | None = IdempotencyKey,
) -> JSONResponse:
    from ringflow.workflows.campaign_messages import LimitsChange

    cid = _campaign_id(campaign_id)
    change = LimitsChange(**body.model_dump())
    return await once(
        request,
        key,
        idempotency_key,
        body.model_dump(mode="json"),
        lambda: _control(request, cid, "set_limits", change),
    )


@router.get(
    "/{campaign_id}/report",
    response_model=list[ReportRow],
    summary="A campaign's report",
    responses={200: {"content": {"text/csv": {"schema": {"type": "string"}}}}},
)
async def report(
    request: Request,
    campaign_id: str,
    format: str = Query("json", pattern="^(json|csv)$"),
    _: keys.KeyInfo = Depends(require("campaigns:read")),
) -> Any:
    """One row per contact: attempts, final state and outcome, disposition, extracted values
    (``?format=csv`` or ``Accept: text/csv`` for the CLI's CSV)."""
    from ringflow.activities import campaign_store as store
    from ringflow.campaigns import report_csv

    cid = _campaign_id(campaign_id)
    rows = await asyncio.to_thread(store.report, request.app.state.settings.database_url, cid)
    if not rows:
        raise ProblemError(
            404, f"no contacts for campaign '{cid}'", errors=[field("path.campaign_id", "no contacts")]
        )
    if format == "csv" or "text/csv" in request.headers.get("accept", ""):
        return Response(report_csv(rows), media_type="text/csv")
    return JSONResponse(rows)
