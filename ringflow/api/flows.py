"""``/v1/flows``: the flows the API can start (its flow directories) and validation with the
same errors as ``ringflow flow validate --json``."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from ringflow.api import keys
from ringflow.api.auth import require
from ringflow.api.idempotency import IdempotencyKey, once
from ringflow.api.models import FlowCheck, FlowInfo, FlowReport
from ringflow.api.problems import PROBLEM_RESPONSES, ProblemError, field

router = APIRouter(prefix="/v1/flows", tags=["flows"], responses=PROBLEM_RESPONSES)


def validate(settings: Any, check: FlowCheck) -> dict[str, Any]:
    """The report ``flow validate --json`` prints: for a reference, the file's (its handlers
    imported, as the worker would); for text, the text's (no handlers imported: uploaded
    text names modules it cannot bring)."""
    from ringflow.callflow.loader import parse_text, validate_data, validate_file
    from ringflow.flow_refs import FlowRefError, resolve

    if (check.flow is None) == (check.source is None):
        raise ProblemError(
            422,
            "give exactly one of `flow` (a reference) and `source` (the flow's text)",
            errors=[
                field("flow", "exactly one of flow and source"),
                field("source", "exactly one of flow and source"),
            ],
        )
    if check.flow is not None:
        try:
            path = resolve(check.flow, settings.flows_dir)
        except FlowRefError as exc:
            raise ProblemError(422, str(exc), errors=[field("flow", str(exc))]) from None
        report = validate_file(path)
        return {**report.as_dict(), "file": check.flow}
    assert check.source is not None
    try:
        data = parse_text(check.source, "<source>")
    except ValueError as exc:
        return {"file": None, "valid": False, "errors": [{"path": "", "message": str(exc)}], "warnings": []}
    return {**validate_data(data, source=None, load_handlers=False).as_dict(), "file": None}


@router.post("/validate", response_model=FlowReport, summary="Validate a flow")
async def validate_route(
    request: Request,
    body: FlowCheck,
    key: keys.KeyInfo = Depends(require("flows:read")),
    idempotency_key: str | None = IdempotencyKey,
) -> JSONResponse:
    """200 with ``valid`` false and every problem (path and message) for an invalid flow."""

    async def make() -> tuple[int, Any]:
        return 200, await asyncio.to_thread(validate, request.app.state.settings, body)

    return await once(request, key, idempotency_key, body.model_dump(mode="json"), make)


@router.get("", response_model=list[FlowInfo], summary="List flows")
async def list_flows(request: Request, _: keys.KeyInfo = Depends(require("flows:read"))) -> Any:
    """The flows under ``RINGFLOW_FLOWS_DIR`` a call can be started with, by name and version."""
    from ringflow.flow_refs import catalogue, flow_dirs

    settings = request.app.state.settings
    dirs = flow_dirs(settings.flows_dir)
    found = await asyncio.to_thread(catalogue, settings.flows_dir)

    def rel(p: Any) -> str:
        for d in dirs:
            if d in p.parents:
                return str(p.relative_to(d))
        return p.name

    return [FlowInfo(name=f.name, version=f.version, file=rel(f.path)) for f in found]
