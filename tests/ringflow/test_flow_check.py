"""``ringflow flow check`` against calls recorded on a real Temporal: an unchanged flow changes
no call (exit 0); a changed gate and a removed function are found in the calls they would
send elsewhere, with the first step where they part (exit 1); the others stay the same."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from typer.testing import CliRunner, Result

from ringflow.callflow.loader import load_flow
from ringflow.cli import app
from tests.support.wfkit import FIXTURES, Agent, running_worker, start, wait_until
from tests.workflows.test_flow_versions import happy_path

GATE = """
  route:
    type: gate
    branches:
      - when: {var: clinic_name, op: "==", value: "Harbour Clinic"}
        to: offer
    default: handoff
"""


def gated(text: str, clinic: str = "Harbour Clinic") -> str:
    """The clinic flow with a gate between verify and offer."""
    text = text.replace(
        "{name: confirmed, transition_only: true, description: They confirmed., transition_to: offer}",
        "{name: confirmed, transition_only: true, description: They confirmed., transition_to: route}",
    )
    return text.replace("  offer:\n", GATE.replace("Harbour Clinic", clinic).lstrip("\n") + "  offer:\n", 1)


async def wrong_number_call(call: Any) -> None:
    snap = await call.attach("agent-a")
    agent = Agent(call, epoch=snap.epoch, seq=snap.next_seq - 1)
    await agent.say(("assistant", "Hello, is this Alex Doe?"), ("user", "No, wrong number."))
    await agent.transition("verify", "wrong_person")
    await call.handle.result()


@pytest.mark.timeout(240)
async def test_flow_check_finds_the_calls_a_change_sends_elsewhere(
    tmp_path: Path,
    cli_env: None,
    temporal_client: Client,
    task_queue: str,
    sqlite_url: str,
) -> None:
    shutil.copy(FIXTURES / "clinic_handlers.py", tmp_path / "clinic_handlers.py")
    text = (FIXTURES / "clinic.yaml").read_text()
    flow_name = f"check_{task_queue[-8:].replace('-', '_')}"  # this test's calls only
    text = text.replace("flow: clinic_reminder", f"flow: {flow_name}")
    recorded = tmp_path / "recorded.yaml"
    recorded.write_text(gated(text))
    definition = load_flow(recorded)
    async with running_worker(temporal_client, task_queue, sqlite_url, flows_dir=str(tmp_path)):
        a = await start(temporal_client, task_queue, definition)
        await happy_path(a)
        b = await start(temporal_client, task_queue, definition)
        await wrong_number_call(b)

    runner = CliRunner()

    async def check(path: Path) -> tuple[Result, dict[str, Any]]:
        res = await asyncio.to_thread(
            runner.invoke, app, ["flow", "check", str(path), "--last", "10", "--flow", flow_name, "--json"]
        )
        assert "Traceback" not in res.output, res.output
        return res, json.loads(res.stdout)

    async def both_listed() -> dict[str, Any] | None:  # visibility is eventually consistent
        _, doc = await check(recorded)
        return doc if doc["checked"] == 2 else None

    doc = await wait_until(both_listed, what="both calls in visibility")
    assert doc["changed"] == 0 and doc["unreadable"] == []
    by_id = {c["call_id"]: c for c in doc["calls"]}
    assert by_id[a.call_id]["recorded_path"] == ["verify", "route", "offer", "booked"]
    assert by_id[a.call_id]["recorded_gates"] == [["route", "offer"]]
    res = await asyncio.to_thread(
        runner.invoke, app, ["flow", "check", str(recorded), "--last", "10", "--flow", flow_name]
    )
    assert res.exit_code == 0 and res.stdout.splitlines()[-1] == "0 of 2 calls would change"

    # a changed gate: the booked call goes to the handoff instead
    moved = tmp_path / "moved_gate.yaml"
    moved.write_text(gated(text, clinic="Other Clinic"))
    res, doc = await check(moved)
    assert res.exit_code == 1 and doc["changed"] == 1 and doc["gates_changed"] == 1
    c = next(c for c in doc["calls"] if c["call_id"] == a.call_id)
    assert c["new_gates"] == [["route", "handoff"]] and c["new_disposition"] == "callback"
    assert not c["path_same"] and not c["disposition_same"]
    # and the LLM's later call to book, made on offer, finds the call ended at the handoff
    assert c["recorded_refused"] == [] and len(c["new_refused"]) == 1 and not c["refused_same"]
    part = c["first_difference"]
    assert part["recorded"]["node"] == "offer" and part["new"]["node"] == "handoff"
    assert "confirmed" in part["event"]
    assert next(c for c in doc["calls"] if c["call_id"] == b.call_id)["changed"] is False

    # a removed function: the LLM's call to book is refused, the call stays on offer
    removed = tmp_path / "removed.yaml"
    removed.write_text(
        gated(text).replace(
            "      - name: book\n        transition_to: {field: status, cases: {booked: booked, "
            "taken: offer}, default: handoff}\n",
            "",
        )
    )
    res, doc = await check(removed)
    assert res.exit_code == 1 and doc["changed"] == 1 and doc["refused_changed"] == 1
    c = next(c for c in doc["calls"] if c["call_id"] == a.call_id)
    assert c["recorded_refused"] == [] and len(c["new_refused"]) == 1 and "book" in c["new_refused"][0]
    assert c["new_path"] == ["verify", "route", "offer"] and c["new_disposition"] is None
    part = c["first_difference"]
    assert "function_called(name=book" in part["event"] and part["new"]["refused"]
    res = await asyncio.to_thread(
        runner.invoke, app, ["flow", "check", str(removed), "--last", "10", "--flow", flow_name]
    )
    assert res.exit_code == 1 and "CHANGED (path, refused calls, disposition)" in res.stdout
    assert "1 of 2 calls would change" in res.stdout


def test_flow_check_usage_errors_name_what_is_wrong() -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["flow", "check", str(FIXTURES / "clinic.yaml")])
    assert res.exit_code == 2 and "--against-calls QUERY or --last N --flow NAME" in res.stderr
    res = runner.invoke(app, ["flow", "check", str(FIXTURES / "clinic.yaml"), "--last", "3"])
    assert res.exit_code == 2 and "--last N needs --flow NAME" in res.stderr
    res = runner.invoke(app, ["flow", "check", "nope.yaml", "--last", "3", "--flow", "x"])
    assert res.exit_code == 2 and "nope.yaml" in res.stderr
