"""What a call may keep in Temporal's history and visibility: no HTTP request headers, no
undeclared variables, no undeclared dispositions. A real CallWorkflow on the dev server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from temporalio.client import Client, WorkflowFailureError

from ringflow.activities.persistence import load_call
from ringflow.callflow.errors import FlowError
from ringflow.callflow.loader import validate_data
from ringflow.callflow.model import FlowDefinition
from ringflow.contract.call import CallInput
from ringflow.workflows.call import CallWorkflow
from tests.support.loopback import serve_app
from tests.support.mcpkit import serving
from tests.support.payloads import payloads_in
from tests.support.wfkit import Agent, req, running_worker, start, wait_state

TOKEN = "tok-9f3c-never-in-history"


@pytest_asyncio.fixture
async def crm() -> AsyncIterator[tuple[str, list[str | None]]]:
    auth: list[str | None] = []

    async def company(request: web.Request) -> web.Response:
        auth.append(request.headers.get("Authorization"))
        return web.json_response({"status": "found", "tier": "gold"})

    app = web.Application()
    app.router.add_get("/companies/{name}", company)
    async with serve_app(app) as url:
        yield url, auth


async def events_carrying(client: Client, handle: Any, needle: str) -> list[int]:
    """Types of the history events holding ``needle`` in a payload, decoded by the client's codec
    (payloads may be encrypted at rest)."""
    codec = client.data_converter.payload_codec
    out: list[int] = []
    for event in (await handle.fetch_history()).events:
        payloads = payloads_in(event)
        if codec is not None and payloads:
            payloads = await codec.decode(payloads)
        if any(needle.encode() in p.data for p in payloads):
            out.append(event.event_type)
    return out


def crm_flow(timeout_s: float = 5, mcp_url: str | None = None) -> FlowDefinition:
    """The CRM lookup; ``timeout_s`` over 10 runs it as a normal activity (its input is an
    ActivityTaskScheduled event), at most 10 as a local one (a marker). With ``mcp_url``, an
    MCP server with the same token in its ``headers`` offers ``find_customer`` too."""
    data: dict[str, Any] = {
        "flow": "crm",
        "variables": {"crm_base_url": {"type": "string", "required": True}},
        "nodes": {
            "ask": {
                "task": "Find the company.",
                "functions": [
                    {
                        "name": "lookup_company",
                        "description": "Look a company up.",
                        "parameters": {
                            "type": "object",
                            "properties": {"company": {"type": "string"}},
                            "required": ["company"],
                        },
                        "http": {
                            "url": "{{crm_base_url}}/companies/{{company}}",
                            "headers": {"Authorization": f"Bearer {TOKEN}"},
                            "timeout_s": timeout_s,
                        },
                    },
                    {
                        "name": "done",
                        "transition_only": True,
                        "description": "Finish.",
                        "transition_to": "bye",
                    },
                ],
            },
            "bye": {"type": "end", "task": "Say goodbye.", "disposition": "found"},
        },
    }
    if mcp_url is not None:
        data["mcp_servers"] = {
            "crm": {"url": mcp_url, "headers": {"Authorization": f"Bearer {TOKEN}"}, "timeout_s": 5}
        }
        data["nodes"]["ask"]["functions"].append(
            {
                "name": "find_customer",
                "description": "Look the caller up.",
                "mcp": {"server": "crm", "tool": "lookup_customer"},
            }
        )
    report = validate_data(data)
    assert report.definition is not None, report.errors
    return report.definition


@pytest.mark.parametrize("timeout_s", [5, 30], ids=["local-activity", "activity"])
async def test_http_request_headers_never_reach_the_history(
    temporal_client: Client, task_queue: str, sqlite_url: str, crm: Any, timeout_s: float
) -> None:
    base, auth = crm
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue, crm_flow(timeout_s), variables={"crm_base_url": base})
        out = await call.call_function(req("ask", "lookup_company", company="acme"))
        assert out.result == {"status": "found", "tier": "gold"}
        assert auth == [f"Bearer {TOKEN}"]  # the request itself carried it
        await Agent(call).transition("ask", "done")
        await wait_state(call, lambda s: s.node == "bye", what="node bye")
        await call.hangup()
        await call.handle.result()
    carriers = await events_carrying(temporal_client, call.handle, TOKEN)
    # the flow (with its header) is the call's input; nothing the call did since may repeat it
    assert carriers == [1], carriers  # EVENT_TYPE_WORKFLOW_EXECUTION_STARTED


async def test_mcp_server_headers_never_reach_the_history(
    temporal_client: Client, task_queue: str, sqlite_url: str, crm: Any, tmp_path: Path
) -> None:
    """The server's ``headers`` go with its tools' listing at the call's start and with each
    tool call (the real MCP server on loopback logs what it got), yet no activity's input
    (listing or call) repeats them."""
    base, _ = crm
    with serving(tmp_path / "calls.jsonl") as server:
        async with running_worker(temporal_client, task_queue, sqlite_url):
            call = await start(
                temporal_client, task_queue, crm_flow(mcp_url=server.url), variables={"crm_base_url": base}
            )
            out = await call.call_function(req("ask", "find_customer", phone="+15550100"))
            assert out.result == {"found": True, "name": "Dana Reyes", "tier": "gold"}, out
            seen = [c for c in server.calls() if c["tool"] == "lookup_customer"]
            assert [c["auth"] for c in seen] == [f"Bearer {TOKEN}"]  # the request carried it
            await call.hangup()
            await call.handle.result()
    history = await call.handle.fetch_history()
    assert any(
        e.activity_task_scheduled_event_attributes.activity_type.name == "mcp_list_tools"
        for e in history.events
    )  # the listing ran as an activity whose input is history
    assert await events_carrying(temporal_client, call.handle, TOKEN) == [1]


SSN = "123-45-6789"


async def test_undeclared_variables_are_refused_by_the_client(
    temporal_client: Client, task_queue: str
) -> None:
    with pytest.raises(FlowError) as err:
        await start(temporal_client, task_queue, crm_flow(), variables={"crm_base_url": "x", "ssn": SSN})
    assert "'ssn' is not a declared variable" in str(err.value) and SSN not in str(err.value)


async def test_undeclared_variables_are_refused_by_the_workflow_itself(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url):
        handle = await temporal_client.start_workflow(
            CallWorkflow.run,
            CallInput(
                call_id="undeclared",
                definition=crm_flow(),
                variables={"crm_base_url": "http://127.0.0.1:9", "ssn": SSN},
            ),
            id=f"call-undeclared-{uuid.uuid4().hex[:6]}",
            task_queue=task_queue,
        )
        with pytest.raises(WorkflowFailureError) as err:
            await handle.result()
    cause = str(err.value.cause)
    assert "'ssn' is not a declared variable" in cause and SSN not in cause
    assert load_call("undeclared", database_url=sqlite_url) is None  # nothing was stored
