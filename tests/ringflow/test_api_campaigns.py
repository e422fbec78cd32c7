"""``/v1/campaigns`` against a real Temporal dev server, Redis and SQLite, its calls dialed
against the LiveKit fake (the one faked boundary): a campaign created from an uploaded CSV
paces, steers and reports as ``ringflow campaign`` does for the same contacts."""

from __future__ import annotations

import asyncio
import csv
import io

import pytest
from temporalio.client import Client
from typer.testing import CliRunner

from ringflow.cli import app as cli
from tests.support.apikit import api_client, api_settings, new_key
from tests.support.campaignkit import REDIS, fake_line, new_id, stand_in_agent
from tests.support.wfkit import running_worker

CONTACTS = "phone,timezone,patient\n+12125550801,America/New_York,Sam\n+12125550802,,Ann\n+12125550801,,Sam\n"


async def test_a_campaign_from_an_upload_paces_steers_and_reports_as_the_cli(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    settings = api_settings(sqlite_url, task_queue, redis_url=REDIS)
    key = new_key(sqlite_url, "campaigns:read", "campaigns:write")
    cid = new_id("api")
    form = {
        "flow": "clinic.yaml",
        "trunk": "ST_1",
        "campaign_id": cid,
        "cps": "5",
        "window": "always",
        "retry": "no_answer=1/1s",
    }
    files = {"contacts": ("c.csv", CONTACTS, "text/csv"), "dnc": ("dnc.txt", "+12125550802\n", "text/plain")}
    async with (
        fake_line(monkeypatch) as lk,
        running_worker(temporal_client, task_queue, sqlite_url, redis_url=REDIS),
        stand_in_agent(temporal_client, lk),
        api_client(settings, temporal_client, key) as http,
    ):
        bad = await http.post(
            "/v1/campaigns",
            data={**form, "campaign_id": new_id("bad")},
            files={"contacts": ("x.csv", "phone\n12\n")},
        )
        made = await http.post("/v1/campaigns", data=form, files=files, headers={"Idempotency-Key": cid})
        again = await http.post("/v1/campaigns", data=form, files=files, headers={"Idempotency-Key": cid})
        assert made.status_code == 201, made.text
        assert again.json() == made.json() and again.headers["Idempotent-Replayed"] == "true"
        paused = await http.post(f"/v1/campaigns/{cid}/pause")
        assert paused.status_code == 200 and paused.json()["result"] in ("paused", "cancelled"), paused.text
        limits = await http.post(f"/v1/campaigns/{cid}/limits", json={"max_concurrent": 2})
        resumed = await http.post(f"/v1/campaigns/{cid}/resume")
        assert resumed.status_code in (200, 409), resumed.text  # 409: it had already finished
        await asyncio.wait_for(temporal_client.get_workflow_handle(f"campaign-{cid}").result(), 60)
        progress = (await http.get(f"/v1/campaigns/{cid}")).json()
        listed = (await http.get("/v1/campaigns")).json()
        report = await http.get(f"/v1/campaigns/{cid}/report")
        report_csv = await http.get(f"/v1/campaigns/{cid}/report", params={"format": "csv"})
        missing = await http.get("/v1/campaigns/nosuch")
    assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "contacts"
    assert "x.csv:2" in bad.json()["detail"]  # the line, as the CLI names it
    assert made.json()["contacts"] == 2  # the same number twice is one contact
    assert limits.status_code in (200, 409), limits.text
    assert progress["status"] == "finished" and progress["contacts"] == {"reached": 1, "dnc": 1}
    assert any(c["id"] == cid and c["flow"] == "clinic_reminder" for c in listed)
    assert [(r["phone"], r["state"], r["attempts"]) for r in report.json()] == [
        ("+12125550801", "reached", 1),
        ("+12125550802", "dnc", 0),
    ]
    assert [d.sip_call_to for d in lk.dials] == ["+12125550801"]
    monkeypatch.setenv("RINGFLOW_DATABASE_URL", sqlite_url)
    shown = CliRunner().invoke(cli, ["campaign", "report", cid, "--csv"])
    assert report_csv.headers["content-type"].startswith("text/csv")
    assert report_csv.text == shown.output  # the CLI's report, byte for byte
    assert list(csv.DictReader(io.StringIO(report_csv.text)))[1]["timezone"] == "America/New_York"
    assert missing.status_code == 404 and missing.json()["errors"][0]["field"] == "path.campaign_id"
