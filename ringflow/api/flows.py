"""``/v1/flows``: the flows under the API's flow directories, validation with the same errors
as ``ringflow flow validate --json``, and published versions as ``ringflow flow publish|versions|
show|promote`` keep them (``activities/flow_store.py``: the same store, the same resolution)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import JSONResponse

from ringflow.api import keys
from ringflow.api.auth import require
from ringflow.api.idempotency import IdempotencyKey, once
from ringflow.api.models import (
    FlowCheck,
    FlowInfo,
    FlowReport,
    FlowVersion,
    FlowVersionShown,
    Promoted,
    PromoteFlow,
    PublishedFlow,
    PublishFlow,
)
from ringflow.api.problems import PROBLEM_RESPONSES, ProblemError, field, issues_problem

router = APIRouter(prefix="/v1/flows", tags=["flows"], responses=PROBLEM_RESPONSES)


def one_of(flow: str | None, source: str | None) -> None:
    if (flow is None) == (source is None):
        raise ProblemError(
            422,
            "give exactly one of `flow` (a file) and `source` (the flow's text)",
            errors=[
                field("flow", "exactly one of flow and source"),
                field("source", "exactly one of flow and source"),
            ],
        )


def flow_file(settings: Any, ref: str) -> Any:
    """The file under the flow directories a body's ``flow`` names, or a 422 naming it."""
    from ringflow.flow_refs import FlowRefError, is_file_ref, resolve_file

    if not is_file_ref(ref):
        why = "a file under RINGFLOW_FLOWS_DIR (.yaml, .yml or .json) is expected here, not a name"
        raise ProblemError(422, f"'{ref[:300]}': {why}", errors=[field("flow", why)])
    try:
        return resolve_file(ref, settings.flows_dir)
    except FlowRefError as exc:
        raise ProblemError(422, str(exc), errors=[field("flow", str(exc))]) from None


def validate(settings: Any, check: FlowCheck) -> dict[str, Any]:
    """The report ``flow validate --json`` prints: for a file, the file's (its handlers
    imported, as the worker would); for text, the text's (no handlers imported: uploaded
    text names modules it cannot bring)."""
    from ringflow.activities.flow_store import version_source
    from ringflow.callflow.loader import parse_text, validate_data, validate_file

    one_of(check.flow, check.source)
    versions = version_source(settings.database_url)  # for subflow nodes' use: NAME@VERSION
    if check.flow is not None:
        report = validate_file(flow_file(settings, check.flow), versions=versions)
        return {**report.as_dict(), "file": check.flow}
    assert check.source is not None
    try:
        data = parse_text(check.source, "<source>")
    except ValueError as exc:
        return {"file": None, "valid": False, "errors": [{"path": "", "message": str(exc)}], "warnings": []}
    report = validate_data(data, source=None, load_handlers=False, versions=versions)
    return {**report.as_dict(), "file": None}


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
    """The flow files under ``RINGFLOW_FLOWS_DIR`` a call can be started with, by name and version."""
    from ringflow.flow_refs import catalogue, relative

    settings = request.app.state.settings
    found = await asyncio.to_thread(catalogue, settings.flows_dir)
    return [
        FlowInfo(name=f.name, version=f.version, file=relative(f.path, settings.flows_dir)) for f in found
    ]


def version_row(v: Any) -> dict[str, Any]:
    """A published version as ``flow versions --json`` prints it."""
    return FlowVersion(
        name=v.name,
        version=v.version,
        ref=f"{v.name}@{v.version}",
        flow_version=v.flow_version,
        handlers=v.handlers,
        channels=v.channels,
        published_at=v.published_at,
    ).model_dump(mode="json")


def publish(settings: Any, body: PublishFlow) -> tuple[bool, Any]:
    """Publish the body's file or text; whether the version is new, and the version."""
    from ringflow.activities import flow_store
    from ringflow.callflow.errors import FlowError
    from ringflow.callflow.loader import load_flow, parse_text, validate_data

    one_of(body.flow, body.source)
    db = settings.database_url
    try:
        if body.flow is not None:
            path = flow_file(settings, body.flow)
            try:
                versions = flow_store.version_source(db)
                definition = flow_store.named(load_flow(path, versions=versions), body.name)
            except FlowError as exc:
                raise issues_problem(422, f"flow '{body.flow}' is invalid", exc.errors, "flow") from None
            handlers = flow_store.handler_hashes(definition, path.parent)
        else:
            assert body.source is not None
            try:
                data = parse_text(body.source, "<source>")
            except ValueError as exc:
                raise ProblemError(422, str(exc), errors=[field("source", str(exc))]) from None
            report = validate_data(
                data, source=None, load_handlers=False, versions=flow_store.version_source(db)
            )
            if report.definition is None:
                raise issues_problem(422, "the flow is invalid", report.errors, "source")
            definition = flow_store.named(report.definition, body.name)
            handlers = flow_store.handler_hashes(definition, None)
    except flow_store.FlowRefError as exc:  # a --name that is no flow name
        raise ProblemError(422, str(exc), errors=[field("name", str(exc))]) from None
    version = flow_store.content_id(flow_store.content_of(definition), handlers)
    existed = flow_store.get_version(db, definition.flow.flow, version) is not None
    return not existed, flow_store.publish(db, definition, handlers)


@router.post("/publish", status_code=201, response_model=PublishedFlow, summary="Publish a flow version")
async def publish_route(
    request: Request,
    body: PublishFlow,
    key: keys.KeyInfo = Depends(require("flows:write")),
    idempotency_key: str | None = IdempotencyKey,
) -> JSONResponse:
    """Store the flow as an immutable, content-addressed version (``ringflow flow publish``):
    201 with the new version, 200 with the same one when that content was already published."""

    async def make() -> tuple[int, Any]:
        created, v = await asyncio.to_thread(publish, request.app.state.settings, body)
        return (201 if created else 200), {**version_row(v), "created": created}

    return await once(request, key, idempotency_key, body.model_dump(mode="json"), make)


NAME = Path(max_length=64, pattern=r"^[a-z][a-z0-9_-]{0,63}$", description="A flow name.")
REF = Path(max_length=200, description="NAME, NAME@VERSION or NAME@CHANNEL.")


@router.get("/{name}/versions", response_model=list[FlowVersion], summary="A flow's published versions")
async def versions(
    request: Request, name: str = NAME, _: keys.KeyInfo = Depends(require("flows:read"))
) -> Any:
    """Every published version of the flow, newest first, with the channels serving each."""
    from ringflow.activities.flow_store import list_versions

    found = await asyncio.to_thread(list_versions, request.app.state.settings.database_url, name)
    if not found:
        raise ProblemError(
            404,
            f"no version of flow '{name}' is published (POST /v1/flows/publish)",
            errors=[field("path.name", "no published version")],
        )
    return [version_row(v) for v in found]


@router.get("/{ref}", response_model=FlowVersionShown, summary="Show a published flow version")
async def show(request: Request, ref: str = REF, _: keys.KeyInfo = Depends(require("flows:read"))) -> Any:
    """The version a reference names now (``ringflow flow show NAME@CHANNEL --json``), with its
    definition."""
    from ringflow.activities import flow_store
    from ringflow.flow_refs import is_file_ref

    if is_file_ref(ref):
        why = "a published flow's NAME, NAME@VERSION or NAME@CHANNEL is expected here, not a file"
        raise ProblemError(404, f"'{ref[:200]}': {why}", errors=[field("path.ref", why)])
    db = request.app.state.settings.database_url

    def read() -> tuple[Any, Any]:
        v = flow_store.resolve(db, ref)
        return v, flow_store.load_definition(db, v.name, v.version)

    try:
        v, definition = await asyncio.to_thread(read)
    except flow_store.FlowRefError as exc:
        raise ProblemError(404, str(exc), errors=[field("path.ref", str(exc))]) from None
    return {**version_row(v), "definition": definition.model_dump(mode="json", by_alias=True)}


@router.post("/promote", response_model=Promoted, summary="Point a channel at a version")
async def promote_route(
    request: Request,
    body: PromoteFlow,
    key: keys.KeyInfo = Depends(require("flows:write")),
    idempotency_key: str | None = IdempotencyKey,
) -> JSONResponse:
    """``ringflow flow promote NAME@VERSION --channel CHANNEL``: calls already running keep the
    version they started with; the next call that names the channel gets this one."""
    from ringflow.activities import flow_store

    db = request.app.state.settings.database_url
    name, at, tail = body.flow.partition("@")
    if not at or not name or not tail:
        why = "NAME@VERSION is expected (see GET /v1/flows/{name}/versions)"
        raise ProblemError(422, why, errors=[field("flow", why)])

    def move() -> dict[str, Any]:
        v = flow_store.resolve(db, body.flow)
        before = flow_store.channels(db, v.name).get(body.channel)
        flow_store.promote(db, v.name, v.version, body.channel)
        return Promoted(name=v.name, channel=body.channel, version=v.version, previous=before).model_dump()

    async def make() -> tuple[int, Any]:
        try:
            return 200, await asyncio.to_thread(move)
        except flow_store.FlowRefError as exc:
            where = "channel" if str(exc).startswith("channel ") else "flow"
            raise ProblemError(422, str(exc), errors=[field(where, str(exc))]) from None

    return await once(request, key, idempotency_key, body.model_dump(mode="json"), make)
