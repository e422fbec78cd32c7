"""``ringflow journey ...`` as the user runs it: a bad number refused before anything
starts; a journey started, listed, shown on one timeline and cancelled against a real
Temporal dev server, its first call dialed against the LiveKit fake."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from temporalio.client import Client
from typer.testing import CliRunner, Result

from ringflow.cli import app
from ringflow.workflows.journey_client import JourneyHandle
from tests.support.campaignkit import fake_line
from tests.support.journeykit import follow_up_asked, journey_agent, phone
from tests.support.wfkit import FIXTURES, running_worker, wait_until

FLOW = str(FIXTURES / "journey.yaml")
PHONE = phone(175)


async def test_start_list_show_and_cancel_a_journey(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    temporal_server: object,
    temporal_client: Client,
    task_queue: str,
    sqlite_url: str,
) -> None:
    for k, v in {
        "RINGFLOW_TEMPORAL_ADDRESS": temporal_server.address,  # type: ignore[attr-defined]
        "RINGFLOW_DATABASE_URL": sqlite_url,
        "RINGFLOW_TASK_QUEUE": task_queue,
    }.items():
        monkeypatch.setenv(k, v)
    runner = CliRunner()

    async def cli(*args: str) -> Result:
        res = await asyncio.to_thread(runner.invoke, app, ["journey", *args])
        assert "Traceback" not in res.output, res.output
        return res

    res = await cli("start", "2125550177", "--flow", FLOW, "--var", "patient=Alex")
    assert res.exit_code == 2 and "E.164" in res.output
    res = await cli("show", "journey-check_in-nope")
    assert res.exit_code == 1 and "no journey" in res.output
    async with (
        fake_line(monkeypatch) as lk,
        journey_agent(temporal_client, lk, ["later"]),
        running_worker(temporal_client, task_queue, sqlite_url),
    ):
        res = await cli("start", PHONE, "--flow", FLOW, "--var", "patient=Alex", "--json")
        assert res.exit_code == 0, res.output
        journey_id = json.loads(res.output)["journey_id"]
        assert PHONE.lstrip("+") not in journey_id
        await wait_until(
            lambda: follow_up_asked(JourneyHandle(temporal_client, journey_id)), what="follow-up"
        )
        res = await cli("start", PHONE, "--flow", FLOW, "--var", "patient=Alex")
        assert res.exit_code == 1 and "already has an open journey" in res.output

        async def listed() -> list[dict[str, object]] | None:
            rows = json.loads(
                (await cli("list", "--flow", "check_in", "--status", "scheduled", "--json")).output
            )
            return rows if any(r["journey_id"] == journey_id for r in rows) else None

        await wait_until(listed, what="the journey listed as scheduled")
        res = await cli("show", journey_id, "--json")
        assert res.exit_code == 0, (res.output, res.stderr, res.exception)
        shown = json.loads(res.output)
        assert shown["calls_total"] == 1 and shown["follow_up"]["node"] == "check_in"
        text = (await cli("show", journey_id)).output
        assert "#1" in text and "ended completed at goodbye" in text and "next:" in text
        res = await cli("cancel", journey_id, "--json")
        assert res.exit_code == 0 and json.loads(res.output)["cancelled"] is True
        view = await JourneyHandle(temporal_client, journey_id).result()
    assert view.end == "cancelled" and view.follow_up is None
