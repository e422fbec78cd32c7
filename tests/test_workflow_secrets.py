"""What a call may keep in Temporal's history and visibility: no HTTP request headers, no
undeclared variables, no undeclared dispositions. A real CallWorkflow on the dev server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowFailureError

from activities.persistence import load_call
from callflow.errors import FlowError
from callflow.loader import validate_data
from callflow.model import FlowDefinition
from tests.wfkit import Agent, req, running_worker, start, wait_state
from workflows.call import CallWorkflow
from workflows.messages import CallInput

TOKEN = "tok-9f3c-never-in-history"


@pytest_asyncio.fixture
async def crm() -> AsyncIterator[tuple[str, list[str | None]]]:
    auth: list[str | None] = []

    async def company(request: web.Request) -> web.Response:
        auth.append(request.headers.get("Authorization"))
        return web.json_response({"status": "found", "tier": "gold"})

    app = web.Application()
    app.router.add_get("/companies/{name}", company)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", auth
    finally:
        await runner.cleanup()


def _payloads(msg: Message) -> list[Payload]:
    """Every payload inside a history event, however deep."""
    if isinstance(msg, Payload):
        return [msg]
    found: list[Payload] = []
    for fd, value in msg.ListFields():
        if fd.message_type is None:
            continue
        if fd.message_type.GetOptions().map_entry:
            items = list(value.values())
        elif isinstance(value, Message):
            items = [value]
        else:  # a repeated field
            items = list(value)
        for item in items:
            if isinstance(item, Message):
                found += _payloads(item)
    return found


async def events_carrying(client: Client, handle: Any, needle: str) -> list[int]:
    """Types of the history events holding ``needle`` in a payload, decoded by the client's codec
    (payloads may be encrypted at rest)."""
    codec = client.data_converter.payload_codec
    out: list[int] = []
    for event in (await handle.fetch_history()).events:
        payloads = _payloads(event)
        if codec is not None and payloads:
            payloads = await codec.decode(payloads)
        if any(needle.encode() in p.data for p in payloads):
            out.append(event.event_type)
    return out


def crm_flow() -> FlowDefinition:
    report = validate_data({
        "flow": "crm",
        "variables": {"crm_base_url": {"type": "string", "required": True}},
        "nodes": {
            "ask": {"task": "Find the company.", "functions": [
                {"name": "lookup_company", "description": "Look a company up.",
                 "parameters": {"type": "object", "properties": {"company": {"type": "string"}},
                                "required": ["company"]},
                 "http": {"url": "{{crm_base_url}}/companies/{{company}}",
                          "headers": {"Authorization": f"Bearer {TOKEN}"}, "timeout_s": 5}},
                {"name": "done", "transition_only": True, "description": "Finish.", "transition_to": "bye"}]},
            "bye": {"type": "end", "task": "Say goodbye.", "disposition": "found"},
        },
    })
    assert report.definition is not None, report.errors
    return report.definition


async def test_http_request_headers_never_reach_the_history(
        temporal_client: Client, task_queue: str, sqlite_url: str, crm: Any) -> None:
    base, auth = crm
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue, crm_flow(),
                           variables={"crm_base_url": base})
        out = await call.call_function(req("ask", "lookup_company", company="acme"))
        assert out.result == {"status": "found", "tier": "gold"}
        assert auth == [f"Bearer {TOKEN}"]  # the request itself carried it
        await Agent(call).transition("ask", "done")
        await wait_state(call, lambda s: s["node"] == "bye", what="node bye")
        await call.hangup()
        await call.handle.result()
    carriers = await events_carrying(temporal_client, call.handle, TOKEN)
    # the flow (with its header) is the call's input; nothing the call did since may repeat it
    assert carriers == [1], carriers  # EVENT_TYPE_WORKFLOW_EXECUTION_STARTED


SSN = "123-45-6789"


async def test_undeclared_variables_are_refused_by_the_client(
        temporal_client: Client, task_queue: str) -> None:
    with pytest.raises(FlowError) as err:
        await start(temporal_client, task_queue, crm_flow(), variables={"crm_base_url": "x", "ssn": SSN})
    assert "'ssn' is not a declared variable" in str(err.value) and SSN not in str(err.value)


async def test_undeclared_variables_are_refused_by_the_workflow_itself(
        temporal_client: Client, task_queue: str, sqlite_url: str) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url):
        handle = await temporal_client.start_workflow(
            CallWorkflow.run, CallInput(call_id="undeclared", definition=crm_flow(),
                                        variables={"crm_base_url": "http://127.0.0.1:9", "ssn": SSN}),
            id=f"call-undeclared-{uuid.uuid4().hex[:6]}", task_queue=task_queue)
        with pytest.raises(WorkflowFailureError) as err:
            await handle.result()
    cause = str(err.value.cause)
    assert "'ssn' is not a declared variable" in cause and SSN not in cause
    assert load_call("undeclared", database_url=sqlite_url) is None  # nothing was stored
