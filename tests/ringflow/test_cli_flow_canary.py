"""``ringflow flow canary`` as a user runs it against a real Temporal: a canary started, new
``call start NAME@production`` calls split between the versions, its status, its stop; and a
canary that cannot start refused with the reason and exit code 2."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from temporalio.client import Client
from typer.testing import CliRunner, Result

from ringflow.cli import app
from ringflow.contract.call import CallInput
from tests.support.paths import TESTS
from tests.support.wfkit import running_worker, wait_until

WF = TESTS / "fixtures" / "wf"


@pytest.mark.timeout(180)
async def test_canary_start_split_status_and_stop(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cli_env: None,
    temporal_client: Client,
    task_queue: str,
    sqlite_url: str,
) -> None:
    for name in ("clinic.yaml", "clinic_handlers.py"):
        shutil.copy(WF / name, tmp_path / name)
    monkeypatch.setenv("RINGFLOW_FLOWS_DIR", str(tmp_path))
    flow = tmp_path / "clinic.yaml"
    runner = CliRunner()

    async def cli(*args: str) -> Result:
        res = await asyncio.to_thread(runner.invoke, app, list(args))
        assert "Traceback" not in res.output, res.output
        return res

    v1 = json.loads((await cli("flow", "publish", str(flow), "--json")).stdout)
    await cli("flow", "promote", v1["ref"], "--channel", "production")
    flow.write_text(
        flow.read_text().replace("Confirm you are speaking with", "Check that you are talking to")
    )
    v2 = json.loads((await cli("flow", "publish", str(flow), "--json")).stdout)

    res = await cli("flow", "canary", v2["ref"], "--against", "production")
    assert res.exit_code == 2 and "--percent is required" in res.stderr
    res = await cli("flow", "canary", v2["ref"], "--percent", "150")
    assert res.exit_code == 2 and "--percent 150" in res.stderr
    res = await cli("flow", "canary", v2["ref"], "--percent", "20", "--against", "beta")
    assert res.exit_code == 2 and "no channel 'beta'" in res.stderr
    res = await cli("flow", "canary", "status", "clinic_reminder")
    assert res.exit_code == 2 and "no canary of flow 'clinic_reminder'" in res.stderr

    async with running_worker(temporal_client, task_queue, sqlite_url):
        res = await cli("flow", "canary", v2["ref"], "--percent", "50", "--check-every", "3600", "--json")
        assert res.exit_code == 0, res.output
        started = json.loads(res.stdout)
        assert started["baseline"] == v1["version"] and started["state"] == "running"

        versions = {}
        for i in range(12):
            res = await cli(
                "call",
                "start",
                "clinic_reminder@production",
                "--call-id",
                f"cli-{i}",
                "--var",
                "patient=Alex",
                "--json",
            )
            assert res.exit_code == 0, res.output
            versions[f"cli-{i}"] = json.loads(res.stdout)["flow_ref"]
        assert set(versions.values()) == {v1["ref"], v2["ref"]}  # both sides got calls
        for call_id, ref in list(versions.items())[:4]:  # the workflow's input names that version
            history = await temporal_client.get_workflow_handle(f"call-{call_id}").fetch_history()
            payloads = history.events[0].workflow_execution_started_event_attributes.input.payloads
            (inp,) = await temporal_client.data_converter.decode(list(payloads), [CallInput])
            assert str(inp.flow_ref) == ref

        async def looked() -> bool:
            res = await cli("flow", "canary", "status", "--json")
            rows = json.loads(res.stdout) if res.exit_code == 0 else []
            return bool(rows) and rows[0]["watch"]["checks"] >= 1

        await wait_until(looked, what="the canary's first look")
        res = await cli("flow", "canary", "status", "clinic_reminder")
        assert res.exit_code == 0 and "candidate" in res.stdout and "baseline" in res.stdout
        assert f"vs production ({v1['version']}) at 50%: running" in res.stdout
        res = await cli("flow", "canary", "stop", "clinic_reminder", "--reason", "wrong greeting")
        assert res.exit_code == 0 and "rolls back" in res.stdout
        await temporal_client.get_workflow_handle(started["workflow_id"]).result()
        for call_id in versions:
            await temporal_client.get_workflow_handle(f"call-{call_id}").terminate("test over")
    res = await cli("flow", "canary", "status", "clinic_reminder", "--json")
    row = json.loads(res.stdout)[0]
    assert row["state"] == "rolled_back" and row["reason"] == "stopped: wrong greeting"
    res = await cli("call", "start", "clinic_reminder@production", "--var", "patient=Alex", "--json")
    after = json.loads(res.stdout)
    assert after["flow_ref"] == v1["ref"]  # no split after the rollback
    await temporal_client.get_workflow_handle(after["workflow_id"]).terminate("test over")
