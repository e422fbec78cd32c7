"""HTTP entries' templates: flow values win, undeclared arguments are refused, URL values are
encoded. The pure engine renders the request; the HTTP tool sends it to a loopback server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from aiohttp import web
from temporalio.testing import ActivityEnvironment

from ringflow.activities.http_tool import HttpTool, HttpToolRequest
from ringflow.callflow.effects import RunFunction, ToolResponse
from ringflow.callflow.loader import validate_data
from tests.support.engine_flows import Call, agent, end, engine, flow, go, only
from tests.support.loopback import serve_app

TOKEN = "tok-flow-secret"


@pytest_asyncio.fixture
async def crm() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A CRM on loopback that records the raw path and the Authorization header of each request."""
    seen: list[dict[str, Any]] = []

    async def anything(request: web.Request) -> web.Response:
        seen.append(
            {
                "raw_path": request.raw_path,
                "path": request.path,
                "query": dict(request.query),
                "auth": request.headers.get("Authorization"),
                "host": request.host,
            }
        )
        return web.json_response({"status": "found"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", anything)
    async with serve_app(app) as url:
        yield url, seen


def lookup(url: str, properties: dict[str, Any], method: str = "GET", **schema: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"type": "object", "properties": properties, **schema}
    return {
        "name": "lookup_company",
        "description": "Look a company up.",
        "parameters": params,
        "http": {"method": method, "url": url, "headers": {"Authorization": "Bearer {{crm_token}}"}},
    }


def crm_call(base: str, fn: dict[str, Any]) -> Call:
    variables = {
        "crm_base_url": {"type": "string", "default": base},
        "crm_token": {"type": "string", "default": TOKEN},
    }
    return Call(engine(flow({"ask": agent(fn, go("done", "bye")), "bye": end()}, variables=variables)))


async def send(run: RunFunction) -> dict[str, Any]:
    assert run.http is not None
    req = HttpToolRequest(
        call_id="c1",
        seq=run.run_id,
        method=run.http.method,
        url=run.http.url,
        headers=run.http.headers or {},
        body=run.http.body,
    )
    out: dict[str, Any] = await ActivityEnvironment().run(HttpTool(allow_private=True).http_tool, req)
    return out


async def test_an_argument_named_like_a_flow_value_does_not_move_the_request(crm: Any) -> None:
    base, seen = crm
    # a schema open to other arguments takes them; the flow's crm_base_url must still win
    call = crm_call(
        base,
        lookup(
            "{{crm_base_url}}/companies/{{company}}",
            {"company": {"type": "string"}},
            additionalProperties=True,
        ),
    )
    effects = call.call(
        "lookup_company", company="acme", crm_base_url="http://attacker.test", crm_token="theirs"
    )
    run = only(effects, RunFunction)
    assert run.http.url == f"{base}/companies/acme"
    assert run.http.headers == {"Authorization": f"Bearer {TOKEN}"}
    assert (await send(run))["status"] == "found"
    assert seen[0]["path"] == "/companies/acme" and seen[0]["auth"] == f"Bearer {TOKEN}"


def test_an_undeclared_argument_is_refused_before_anything_runs() -> None:
    call = crm_call(
        "http://127.0.0.1:9",
        lookup("{{crm_base_url}}/companies/{{company}}", {"company": {"type": "string"}}),
    )
    effects = call.call("lookup_company", company="acme", crm_base_url="http://attacker.test")
    assert not [e for e in effects if isinstance(e, RunFunction)]
    refusal = only(effects, ToolResponse)
    assert refusal.error and "crm_base_url" in str(refusal.result)
    assert call.state.pending == {}
    # declared arguments alone still run
    assert only(call.call("lookup_company", company="acme"), RunFunction).http.url.endswith("/companies/acme")


def test_a_parameter_named_like_a_flow_value_is_a_validation_error() -> None:
    data = flow(
        {
            "ask": agent(
                lookup(
                    "{{crm_base_url}}/c/{{company}}",
                    {"company": {"type": "string"}, "crm_token": {"type": "string"}},
                ),
                go("done", "bye"),
            ),
            "bye": end(),
        },
        variables={"crm_base_url": {"type": "string"}, "crm_token": {"type": "string"}},
    )
    report = validate_data(data)
    assert [e.path for e in report.errors] == ["nodes.ask.functions[0].parameters.properties.crm_token"]
    assert "name of a flow value" in report.errors[0].message


async def test_values_in_a_url_path_or_query_are_percent_encoded(crm: Any) -> None:
    base, seen = crm
    call = crm_call(
        base,
        lookup(
            "{{crm_base_url}}/companies/{{company}}?name={{company}}&v=1", {"company": {"type": "string"}}
        ),
    )
    hostile = "../../admin/users?delete=all#"
    run = only(call.call("lookup_company", company=hostile), RunFunction)
    assert (await send(run))["status"] == "found"
    hit = seen[0]
    assert hit["path"] == "/companies/../../admin/users?delete=all#"  # one segment, decoded
    assert hit["raw_path"].startswith("/companies/..%2F..%2Fadmin%2Fusers%3Fdelete%3Dall%23?name=")
    assert hit["query"] == {"name": hostile, "v": "1"}
    dots = only(call.call("lookup_company", company=".."), RunFunction)
    assert dots.http.url.startswith(f"{base}/companies/%2E%2E?")


async def test_raw_opts_a_placeholder_out_of_encoding(crm: Any) -> None:
    base, seen = crm
    call = crm_call(base, lookup("{{crm_base_url}}/{{raw:page}}", {"page": {"type": "string"}}))
    run = only(call.call("lookup_company", page="v2/companies?limit=5"), RunFunction)
    await send(run)
    assert seen[0]["path"] == "/v2/companies" and seen[0]["query"] == {"limit": "5"}


def test_raw_is_only_for_urls() -> None:
    data = flow(
        {
            "ask": agent(
                go_raw := {
                    "name": "x",
                    "transition_only": True,
                    "transition_to": "bye",
                    "description": "Go {{raw:first}}.",
                }
            ),
            "bye": end(),
        },
        variables={"first": {"type": "string"}},
    )
    assert go_raw
    report = validate_data(data)
    assert any("'raw:' applies only" in e.message for e in report.errors)


async def test_an_argument_is_encoded_even_where_the_urls_base_would_be(crm: Any) -> None:
    base, seen = crm
    call = crm_call(base, lookup("{{crm_base_url}}{{company}}", {"company": {"type": "string"}}))
    run = only(call.call("lookup_company", company="/../admin?x=1"), RunFunction)
    assert run.http.url == f"{base}%2F..%2Fadmin%3Fx%3D1"  # not a path: the request fails, nothing leaks
    out = await send(run)
    assert out["status"] == "error" and seen == []
