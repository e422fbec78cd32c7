"""What a call may keep in Temporal's history and visibility: no HTTP request headers, no
undeclared variables, no undeclared dispositions. A real CallWorkflow on the dev server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from aiohttp import web
from temporalio.client import Client

from callflow.loader import validate_data
from callflow.model import FlowDefinition
from tests.wfkit import Agent, req, running_worker, start, wait_state

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
    history = await call.handle.fetch_history()
    carriers = [e.event_type for e in history.events if TOKEN.encode() in e.SerializeToString()]
    # the flow (with its header) is the call's input; nothing the call did since may repeat it
    assert carriers == [1], carriers  # EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
