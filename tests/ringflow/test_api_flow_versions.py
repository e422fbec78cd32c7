"""Published flow versions over HTTP, against a real Temporal dev server and database: publish
(a file of the API's flow directories or the flow's text), list, show and promote as
``ringflow flow publish|versions|show|promote`` do, on the same store; and every flow reference
the API takes (``POST /v1/calls``, ``POST /v1/campaigns``) is a file, ``NAME``,
``NAME@VERSION`` or ``NAME@CHANNEL``, resolved once, the call keeping its version."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from temporalio.client import Client
from typer.testing import CliRunner

from ringflow.activities import flow_store
from ringflow.cli import app as cli
from ringflow.contract.call import CallInput
from ringflow.workflows.campaign_messages import CampaignInput
from ringflow.workflows.client import CallHandle
from tests.support.apikit import api_client, api_settings, new_key
from tests.support.campaignkit import REDIS, new_id
from tests.support.wfkit import FIXTURES, running_worker, wait_state

CLINIC = (FIXTURES / "clinic.yaml").read_text()
# the same flow, its own version 3 and another first prompt: another published version
RETASKED = CLINIC.replace("version: 2", "version: 3").replace(
    "task: Confirm you are speaking with {{patient}}.", "task: Ask who is speaking, politely."
)


async def started_input(client: Client, workflow_id: str, cls: type) -> Any:
    """The input a workflow was started with, decoded as its workers decode it."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    payloads = history.events[0].workflow_execution_started_event_attributes.input.payloads
    return (await client.data_converter.decode([payloads[0]], [cls]))[0]


async def test_publish_list_show_and_promote_as_the_cli(
    temporal_client: Client, task_queue: str, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = api_settings(sqlite_url, task_queue)
    reader = new_key(sqlite_url, "flows:read")
    async with api_client(
        settings, temporal_client, new_key(sqlite_url, "flows:read", "flows:write")
    ) as http:
        first = await http.post("/v1/flows/publish", json={"flow": "clinic.yaml"})
        again = await http.post("/v1/flows/publish", json={"flow": "clinic.yaml"})
        other = await http.post("/v1/flows/publish", json={"source": RETASKED})
        named = await http.post("/v1/flows/publish", json={"source": RETASKED, "name": "clinic_b"})
        listed = await http.get("/v1/flows/clinic_reminder/versions")
        v1, v2 = first.json()["version"], other.json()["version"]
        newest = await http.get("/v1/flows/clinic_reminder")  # no production channel yet: the newest
        promoted = await http.post(
            "/v1/flows/promote", json={"flow": f"clinic_reminder@{v1}", "channel": "production"}
        )
        moved = await http.post(
            "/v1/flows/promote", json={"flow": f"clinic_reminder@{v2}", "channel": "production"}
        )
        back = await http.post(
            "/v1/flows/promote",
            json={"flow": f"clinic_reminder@{v1}", "channel": "production"},
            headers={"Idempotency-Key": "rollback-1"},
        )
        replay = await http.post(
            "/v1/flows/promote",
            json={"flow": f"clinic_reminder@{v1}", "channel": "production"},
            headers={"Idempotency-Key": "rollback-1"},
        )
        canary = await http.post(
            "/v1/flows/promote", json={"flow": f"clinic_reminder@{v2}", "channel": "canary"}
        )
        production = await http.get("/v1/flows/clinic_reminder")
        by_channel = await http.get("/v1/flows/clinic_reminder@canary")
        exact = await http.get(f"/v1/flows/clinic_reminder@{v2}")
        after = (await http.get("/v1/flows/clinic_reminder/versions")).json()
        # what is refused, and where
        no_versions = await http.get("/v1/flows/nosuch/versions")
        no_channel = await http.get("/v1/flows/clinic_reminder@beta")
        a_file = await http.get("/v1/flows/clinic.yaml")
        bad_channel = await http.post(
            "/v1/flows/promote", json={"flow": f"clinic_reminder@{v1}", "channel": "Prod!"}
        )
        no_version = await http.post(
            "/v1/flows/promote", json={"flow": "clinic_reminder", "channel": "production"}
        )
        outside = await http.post("/v1/flows/publish", json={"flow": "../../../etc/hosts.yaml"})
        a_name = await http.post("/v1/flows/publish", json={"flow": "clinic_reminder"})
        invalid = await http.post(
            "/v1/flows/publish",
            json={"source": CLINIC.replace("transition_to: offer", "transition_to: nowhere")},
        )
        bad_name = await http.post("/v1/flows/publish", json={"source": RETASKED, "name": "Not A Name"})
        both = await http.post("/v1/flows/publish", json={"flow": "clinic.yaml", "source": RETASKED})
    async with api_client(settings, temporal_client, reader) as http:
        refused = await http.post("/v1/flows/publish", json={"flow": "clinic.yaml"})
        readable = await http.get("/v1/flows/clinic_reminder/versions")
    assert first.status_code == 201 and first.json()["created"] is True, first.text
    assert again.status_code == 200 and again.json()["created"] is False
    assert again.json()["version"] == v1 and first.json()["ref"] == f"clinic_reminder@{v1}"
    assert first.json()["handlers"]["clinic_handlers"]  # the module beside the file, hashed
    assert other.status_code == 201 and v2 != v1 and other.json()["flow_version"] == 3
    assert other.json()["handlers"] == {"clinic_handlers": ""}  # uploaded text brings no module
    assert named.status_code == 201 and named.json()["name"] == "clinic_b"
    assert [v["version"] for v in listed.json()] == [v2, v1]  # newest first
    assert newest.json()["version"] == v2 and newest.json()["definition"]["flow"]["version"] == 3
    assert promoted.json() == {
        "name": "clinic_reminder",
        "channel": "production",
        "version": v1,
        "previous": None,
    }
    assert moved.json()["previous"] == v1 and back.json()["previous"] == v2
    assert replay.headers["Idempotent-Replayed"] == "true" and replay.json() == back.json()
    assert canary.status_code == 200
    assert production.json()["version"] == v1 and production.json()["channels"] == ["production"]
    assert by_channel.json()["version"] == v2 == exact.json()["version"]
    assert exact.json()["definition"]["flow"]["nodes"]["verify"]["task"] == "Ask who is speaking, politely."
    assert {v["version"]: v["channels"] for v in after} == {v1: ["production"], v2: ["canary"]}
    for r, status, where in (
        (no_versions, 404, "path.name"),
        (no_channel, 404, "path.ref"),
        (a_file, 404, "path.ref"),
        (bad_channel, 422, "channel"),
        (no_version, 422, "flow"),
        (outside, 422, "flow"),
        (a_name, 422, "flow"),
        (bad_name, 422, "name"),
        (both, 422, "flow"),
    ):
        assert r.status_code == status, r.text
        assert r.headers["content-type"] == "application/problem+json"
        assert r.json()["errors"][0]["field"] == where, r.text
    assert "channels: canary, production" in no_channel.json()["detail"]  # what exists instead
    assert invalid.status_code == 422 and invalid.json()["errors"][0]["field"].startswith("source.")
    assert "nowhere" in invalid.json()["detail"]
    assert refused.status_code == 403 and readable.status_code == 200
    # the CLI reads the same store the same way
    monkeypatch.setenv("RINGFLOW_DATABASE_URL", sqlite_url)
    shown = CliRunner().invoke(cli, ["flow", "versions", "clinic_reminder", "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output) == after


async def test_calls_and_campaigns_keep_the_version_their_reference_named(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    settings = api_settings(sqlite_url, task_queue, redis_url=REDIS)
    key = new_key(sqlite_url)
    start = {"variables": {"patient": "Sam Roe"}}
    async with (
        # the worker's flow directory has the handlers module the uploaded version names
        running_worker(temporal_client, task_queue, sqlite_url, flows_dir=str(FIXTURES)),
        api_client(settings, temporal_client, key) as http,
    ):
        v1 = (await http.post("/v1/flows/publish", json={"flow": "clinic.yaml"})).json()["version"]
        v2 = (await http.post("/v1/flows/publish", json={"source": RETASKED})).json()["version"]
        await http.post("/v1/flows/promote", json={"flow": f"clinic_reminder@{v1}", "channel": "production"})
        by_channel = await http.post("/v1/calls", json={"flow": "clinic_reminder@production", **start})
        assert by_channel.status_code == 201, by_channel.text
        await http.post("/v1/flows/promote", json={"flow": f"clinic_reminder@{v2}", "channel": "production"})
        by_name = await http.post("/v1/calls", json={"flow": "clinic_reminder", **start})
        exact = await http.post("/v1/calls", json={"flow": f"clinic_reminder@{v1}", **start})
        by_file = await http.post("/v1/calls", json={"flow": "clinic.yaml", **start})
        unknown = await http.post("/v1/calls", json={"flow": "clinic_reminder@beta", **start})
        unpublished = await http.post("/v1/calls", json={"flow": "nosuch", **start})
        calls = [by_channel.json(), by_name.json(), exact.json(), by_file.json()]
        for c in calls:  # each is running on the worker, with the flow of its version
            await wait_state(
                CallHandle(temporal_client, c["id"]), lambda s: s.node == "verify", what="verify"
            )
        docs = [(await http.get(f"/v1/calls/{c['id']}")).json() for c in calls]
        for c in calls:
            await CallHandle(temporal_client, c["id"]).hangup()
    async with api_client(settings, temporal_client, key) as http:  # no worker runs it: it stays as started
        form = {
            "flow": "clinic_reminder@production",
            "trunk": "ST_1",
            "campaign_id": new_id("ref"),
            "window": "always",
        }
        contacts = {"contacts": ("c.csv", "phone,patient\n+12125550901,Sam\n", "text/csv")}
        campaign = await http.post("/v1/campaigns", data=form, files=contacts)
    assert [c["flow_ref"] for c in calls] == [f"clinic_reminder@{v}" for v in (v1, v2, v1, v1)]
    assert [d["flow_version"] for d in docs] == [2, 3, 2, 2]  # what the worker runs
    for c, v in zip(calls, (v1, v2, v1, v1), strict=True):
        inp = await started_input(temporal_client, c["workflow_id"], CallInput)
        assert inp.flow_ref.version == v  # pinned in the call's input: a promotion cannot move it
    first = await started_input(temporal_client, calls[0]["workflow_id"], CallInput)
    assert first.definition.flow.nodes["verify"].task == "Confirm you are speaking with {{patient}}."
    for r in (unknown, unpublished):
        assert r.status_code == 422 and r.json()["errors"][0]["field"] == "flow", r.text
    assert "channels: production" in unknown.json()["detail"]
    assert campaign.status_code == 201, campaign.text
    assert campaign.json()["flow_ref"] == f"clinic_reminder@{v2}"
    wf = campaign.json()["workflow_id"]
    assert (await started_input(temporal_client, wf, CampaignInput)).flow_ref.version == v2
    await temporal_client.get_workflow_handle(wf).terminate("test over")
    assert flow_store.resolve(sqlite_url, "clinic_reminder").version == v2


@pytest.mark.timeout(180)
async def test_calls_by_channel_split_as_its_running_canary_says(
    temporal_client: Client, task_queue: str, sqlite_url: str, cli_env: None
) -> None:
    """A ``POST /v1/calls`` of ``NAME@CHANNEL`` goes to the side of the channel's canary its
    call id hashes to, as ``ringflow call start`` does, and the call's input pins that side's
    version; a campaign of the channel carries the canary, to split its contacts the same
    way; after the canary is stopped, the channel's own version again."""
    settings = api_settings(sqlite_url, task_queue, redis_url=REDIS)
    start = {"variables": {"patient": "Sam Roe"}}
    runner = CliRunner()
    async with (
        running_worker(temporal_client, task_queue, sqlite_url, flows_dir=str(FIXTURES)),
        api_client(settings, temporal_client, new_key(sqlite_url)) as http,
    ):
        v1 = (await http.post("/v1/flows/publish", json={"flow": "clinic.yaml"})).json()["version"]
        v2 = (await http.post("/v1/flows/publish", json={"source": RETASKED})).json()["version"]
        await http.post("/v1/flows/promote", json={"flow": f"clinic_reminder@{v1}", "channel": "production"})
        canary = [
            "flow",
            "canary",
            f"clinic_reminder@{v2}",
            "--percent",
            "50",
            "--check-every",
            "3600",
            "--json",
        ]
        res = await asyncio.to_thread(runner.invoke, cli, canary)
        assert res.exit_code == 0, res.output
        watch = temporal_client.get_workflow_handle(json.loads(res.stdout)["workflow_id"])
        calls = []
        for _ in range(12):
            r = await http.post("/v1/calls", json={"flow": "clinic_reminder@production", **start})
            assert r.status_code == 201, r.text
            calls.append(r.json())
        assert {c["flow_ref"] for c in calls} == {f"clinic_reminder@{v1}", f"clinic_reminder@{v2}"}
        for c in calls[:4]:
            inp = await started_input(temporal_client, c["workflow_id"], CallInput)
            assert str(inp.flow_ref) == c["flow_ref"]
        form = {"flow": "clinic_reminder@production", "trunk": "ST_1", "campaign_id": new_id("cy")}
        contacts = {"contacts": ("c.csv", "phone,patient\n+12125550902,Sam\n", "text/csv")}
        campaign = await http.post("/v1/campaigns", data=form, files=contacts)
        assert campaign.status_code == 201, campaign.text
        started = await started_input(temporal_client, campaign.json()["workflow_id"], CampaignInput)
        assert started.flow_ref is not None and started.flow_ref.version == v1  # the baseline
        assert started.canary is not None and started.canary.flow_ref.version == v2
        assert started.canary.percent == 50 and started.canary.definition.flow.nodes["verify"].task == (
            "Ask who is speaking, politely."
        )
        await temporal_client.get_workflow_handle(campaign.json()["workflow_id"]).terminate("test over")
        stop = ["flow", "canary", "stop", "clinic_reminder", "--reason", "test over"]
        res = await asyncio.to_thread(runner.invoke, cli, stop)
        assert res.exit_code == 0, res.output
        await watch.result()  # rolled back
        after = await http.post("/v1/calls", json={"flow": "clinic_reminder@production", **start})
        assert after.json()["flow_ref"] == f"clinic_reminder@{v1}"
        for c in [*calls, after.json()]:
            await temporal_client.get_workflow_handle(c["workflow_id"]).terminate("test over")
