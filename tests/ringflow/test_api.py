"""``ringflow api`` against a real Temporal dev server and database: a call started over HTTP
runs to its end and reads back as ``ringflow call show`` prints it; ``Idempotency-Key``
gives one call; keys are scoped and revocable; errors are problem documents naming the field."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from temporalio.client import Client
from typer.testing import CliRunner

from ringflow.cli import app as cli
from ringflow.devstack import DevStack
from ringflow.workflows.client import CallHandle
from tests.support.apikit import api_client, api_settings, new_key
from tests.support.wfkit import Agent, req, running_worker, wait_state, wait_until

START = {"flow": "clinic.yaml", "variables": {"patient": "Sam Roe"}}


async def test_a_call_started_over_http_runs_to_its_end_and_reads_as_call_show(
    temporal_server: DevStack, temporal_client: Client, task_queue: str, sqlite_url: str, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    settings = api_settings(sqlite_url, task_queue)
    key = new_key(sqlite_url, "calls:read", "calls:write")
    async with (
        running_worker(temporal_client, task_queue, sqlite_url),
        api_client(settings, temporal_client, key) as http,
    ):
        started = await http.post("/v1/calls", json=START)
        assert started.status_code == 201, started.text
        call_id = started.json()["id"]
        assert started.json()["flow"] == "clinic_reminder"
        call = CallHandle(temporal_client, call_id)
        agent = Agent(call)
        await agent.say(("assistant", "Hello, is this Sam Roe?"), ("user", "Yes, speaking."))
        await agent.transition("verify", "confirmed")
        await wait_state(call, lambda s: s.node == "offer", what="node offer")
        live = (await http.get(f"/v1/calls/{call_id}")).json()
        assert live["live"] is True and live["status"] == "live" and live["node"] == "offer"
        assert live["path"] == ["verify", "offer"]
        booked = await call.call_function(req("offer", "book", slot="Mon 9"))
        assert booked.decision == "end"
        await wait_until(call.handle.result, what="the call's record")
        got = await http.get(f"/v1/calls/{call_id}")
        turns = await http.get(f"/v1/calls/{call_id}/transcript")
        ran = await http.get(f"/v1/calls/{call_id}/functions")
    assert [(f["name"], f["args"], f["decision"], f["to_node"]) for f in ran.json()] == [
        ("book", {"slot": "Mon 9"}, "end", "booked")
    ]
    assert ran.json()[0]["duration_ms"] >= 0
    assert got.status_code == 200, got.text
    doc = got.json()
    assert doc["id"] == call_id and doc["live"] is False
    assert doc["status"] == "ended" and doc["disposition"] == "booked"
    assert doc["path"] == ["verify", "offer", "booked"] and doc["node"] == "booked"
    monkeypatch.setenv("RINGFLOW_TEMPORAL_ADDRESS", temporal_server.address)
    monkeypatch.setenv("RINGFLOW_DATABASE_URL", sqlite_url)
    shown = await asyncio.to_thread(CliRunner().invoke, cli, ["call", "show", "--json", call_id])
    assert shown.exit_code == 0, shown.output
    want = json.loads(shown.output)
    assert turns.json()["turns"] == want.pop("transcript")
    assert [t["node"] for t in turns.json()["turns"]] == ["verify", "verify"]
    assert {k: v for k, v in doc.items() if k not in ("id", "live")} == want


async def test_the_same_idempotency_key_gives_one_call(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    settings = api_settings(sqlite_url, task_queue)
    key = new_key(sqlite_url, "calls:read", "calls:write")
    async with api_client(settings, temporal_client, key) as http:
        first, second = await asyncio.gather(
            http.post("/v1/calls", json=START, headers={"Idempotency-Key": "order-1"}),
            http.post("/v1/calls", json=START, headers={"Idempotency-Key": "order-1"}),
        )
        third = await http.post("/v1/calls", json=START, headers={"Idempotency-Key": "order-1"})
        other = await http.post("/v1/calls", json=START, headers={"Idempotency-Key": "order-2"})
        misuse = await http.post(
            "/v1/calls",
            json={**START, "variables": {"patient": "Kim"}},
            headers={"Idempotency-Key": "order-1"},
        )
        listed = (await http.get("/v1/calls", params={"flow": "clinic_reminder", "limit": 100})).json()
    assert [r.status_code for r in (first, second, third, other)] == [201] * 4
    assert first.json()["id"] == second.json()["id"] == third.json()["id"] != other.json()["id"]
    assert third.headers["Idempotent-Replayed"] == "true"
    assert misuse.status_code == 422
    assert misuse.headers["content-type"] == "application/problem+json"
    assert misuse.json()["errors"][0]["field"] == "header.Idempotency-Key"
    ids = {first.json()["id"], other.json()["id"]}
    started = [r["id"] for r in listed["data"] if r["id"] in ids]
    assert sorted(started) == sorted(ids)  # one call per key in Temporal, not two
    for call_id in ids:
        await CallHandle(temporal_client, call_id).hangup()


async def test_keys_are_scoped_revocable_and_rate_limited(
    temporal_client: Client, task_queue: str, sqlite_url: str, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RINGFLOW_DATABASE_URL", sqlite_url)
    made = CliRunner().invoke(cli, ["api-key", "create", "--scopes", "calls:read", "--json"])
    assert made.exit_code == 0, made.output
    reader = json.loads(made.output)
    bad = CliRunner().invoke(cli, ["api-key", "create", "--scopes", "calls:reed"])
    assert bad.exit_code == 2 and "unknown scope 'calls:reed'" in bad.output
    listed = CliRunner().invoke(cli, ["api-key", "list", "--json"])
    assert reader["key"] not in listed.output and reader["id"] in listed.output  # never shown again
    settings = api_settings(sqlite_url, task_queue, api_rate_per_s=0.01, api_rate_burst=2)
    async with api_client(settings, temporal_client) as http:
        auth = {"Authorization": f"Bearer {reader['key']}"}
        none = await http.get("/v1/calls")
        wrong = await http.get("/v1/calls", headers={"Authorization": "Bearer rfk_nope_nope"})
        scoped = await http.post("/v1/calls", json=START, headers=auth)
        ok = await http.get("/v1/calls", params={"limit": 1}, headers=auth)
        assert (none.status_code, wrong.status_code, scoped.status_code, ok.status_code) == (
            401,
            401,
            403,
            200,
        )
        assert none.headers["WWW-Authenticate"].startswith("Bearer")
        assert "calls:write" in scoped.json()["detail"]
        limited = await http.get(
            "/v1/calls", params={"limit": 1}, headers=auth
        )  # the key's third request: over a burst of 2
        assert limited.status_code == 429 and int(limited.headers["Retry-After"]) >= 1
        revoked = CliRunner().invoke(cli, ["api-key", "revoke", reader["id"]])
        assert revoked.exit_code == 0, revoked.output
        after = await http.get("/v1/calls", params={"limit": 1}, headers=auth)
        assert after.status_code == 401 and "revoked" in after.json()["detail"]


async def test_errors_are_problem_documents_naming_the_field(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    settings = api_settings(sqlite_url, task_queue)
    key = new_key(sqlite_url)
    async with api_client(settings, temporal_client, key) as http:
        undeclared = await http.post("/v1/calls", json={"flow": "clinic.yaml", "variables": {"patiant": "x"}})
        missing = await http.post("/v1/calls", json={"flow": "clinic.yaml"})
        no_flow = await http.post("/v1/calls", json={"flow": "../../etc/passwd.yaml"})
        shape = await http.post("/v1/calls", json={"flow": "clinic.yaml", "variables": []})
        unknown = await http.get("/v1/calls/nosuchcall")
        status = await http.get("/v1/calls", params={"status": "sleeping"})
        cursor = await http.get("/v1/calls", params={"cursor": "garbage"})
        valid = await http.post("/v1/flows/validate", json={"flow": "clinic.yaml"})
        invalid = await http.post("/v1/flows/validate", json={"source": "flow: x\nnodes: {}\n"})
    for r in (undeclared, missing, no_flow, shape, unknown, status, cursor):
        assert r.headers["content-type"] == "application/problem+json", r.text
        assert r.json()["status"] == r.status_code and r.json()["errors"], r.text
    fields = lambda r: [e["field"] for e in r.json()["errors"]]  # noqa: E731
    assert undeclared.status_code == 422 and any(f.startswith("variables") for f in fields(undeclared))
    assert "patiant" in undeclared.json()["detail"]
    assert missing.status_code == 422 and "patient" in missing.json()["detail"]
    assert no_flow.status_code == 422 and fields(no_flow) == ["flow"]
    assert shape.status_code == 422 and fields(shape) == ["variables"]
    assert unknown.status_code == 404 and fields(unknown) == ["path.call_id"]
    assert status.status_code == 422 and fields(status) == ["query.status"]
    assert cursor.status_code == 400 and fields(cursor) == ["query.cursor"]
    assert valid.status_code == 200 and valid.json()["valid"] is True
    assert invalid.json()["valid"] is False and invalid.json()["errors"]


@pytest.mark.timeout(600)
async def test_five_thousand_calls_page_with_stable_cursors(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """5,000 calls of one campaign (started, no worker: visibility is all a list reads); pages
    of 500 give each exactly once while more calls start between pages."""
    from ringflow.workflows.client import start_call
    from tests.support.wfkit import clinic

    total = int(os.environ.get("RINGFLOW_TEST_API_CALLS", "5000"))
    campaign = f"page-{task_queue}"
    definition = clinic()
    sem = asyncio.Semaphore(100)

    async def one(i: int) -> str:
        async with sem:
            h = await start_call(
                temporal_client,
                definition,
                task_queue=task_queue,
                call_id=f"{campaign}-{i:05d}",
                variables={"patient": "P"},
                campaign_id=campaign,
            )
            return h.call_id

    ids = set(await asyncio.gather(*(one(i) for i in range(total))))

    async def visible() -> bool:
        n = await temporal_client.count_workflows(f"RingflowCampaign = '{campaign}'")
        return n.count == total

    await wait_until(visible, timeout=300, what="every call in visibility")
    settings = api_settings(sqlite_url, task_queue)
    key = new_key(sqlite_url, "calls:read")
    seen: list[str] = []
    async with api_client(settings, temporal_client, key) as http:
        cursor = None
        pages = 0
        while True:
            params = {"campaign": campaign, "limit": 500, **({"cursor": cursor} if cursor else {})}
            page = await http.get("/v1/calls", params=params)
            assert page.status_code == 200, page.text
            seen += [r["id"] for r in page.json()["data"]]
            pages += 1
            if pages == 2:  # calls started mid-listing come before the cursor's place: not seen
                await one(total)
                await one(total + 1)
            cursor = page.json()["next_cursor"]
            if cursor is None:
                break
        changed = await http.get(
            "/v1/calls", params={"campaign": campaign, "status": "live", "cursor": "x" + "A" * 10}
        )
    assert changed.status_code == 400
    assert len(seen) == len(set(seen)) == total and set(seen) == ids
    assert pages in (-(-total // 500), -(-total // 500) + 1)  # the last may be empty
