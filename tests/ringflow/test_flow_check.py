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
from ringflow.simulation import simulator  # noqa: F401  livekit registers its plugins on the main thread: the CLI runs in threads here
from ringflow.simulation.scripted_llm import ScriptedLLM
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


@pytest.mark.timeout(300)
async def test_flow_check_with_the_model_says_the_callers_recorded_turns_again_to_the_new_version(
    tmp_path: Path,
    cli_env: None,
    temporal_client: Client,
    task_queue: str,
    sqlite_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--llm``: the engine check finds the recorded call to a renamed function refused; said
    again to the new version, the model calls the new name and the call goes where it went.
    A prompt that makes the model hand the caller over is found only this way. The model is
    an OpenAI-compatible scripted endpoint (its network boundary), answering as a model would."""
    shutil.copy(FIXTURES / "clinic_handlers.py", tmp_path / "clinic_handlers.py")
    flow_name = f"llmcheck_{task_queue[-8:].replace('-', '_')}"
    text = (FIXTURES / "clinic.yaml").read_text().replace("flow: clinic_reminder", f"flow: {flow_name}")
    recorded = tmp_path / "recorded.yaml"
    recorded.write_text(text)
    async with running_worker(temporal_client, task_queue, sqlite_url, flows_dir=str(tmp_path)):
        call = await start(temporal_client, task_queue, load_flow(recorded))
        await wrong_number_call(call)
    runner = CliRunner()
    base = ["flow", "check", "--last", "10", "--flow", flow_name, "--json"]

    async def listed() -> bool:  # visibility is eventually consistent
        res = await asyncio.to_thread(runner.invoke, app, [*base[:2], str(recorded), *base[2:]])
        return json.loads(res.stdout)["checked"] == 1

    await wait_until(listed, what="the call in visibility")
    renamed = tmp_path / "renamed.yaml"
    renamed.write_text(text.replace("name: wrong_person,", "name: not_the_patient,"))

    async with ScriptedLLM() as model:
        monkeypatch.setenv("OPENAI_BASE_URL", model.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test-key-not-secret")

        async def check(path: Path) -> tuple[Result, dict[str, Any]]:
            res = await asyncio.to_thread(runner.invoke, app, [*base[:2], str(path), *base[2:], "--llm"])
            assert "Traceback" not in res.output, res.output
            return res, json.loads(res.stdout)

        model.lane().queue_reply([{"call": "not_the_patient", "args": {}}])
        res, doc = await check(renamed)
        assert doc["changed"] == 1 and doc["refused_changed"] == 1  # the engine: wrong_person refused
        (again,) = doc["llm"]["calls"]
        assert again["error"] is None and again["caller_turns"] == 1
        assert (again["recorded_path"], again["new_path"]) == (
            ["verify", "wrong_number"],
            ["verify", "wrong_number"],
        )
        assert not again["changed"] and again["new_disposition"] == "wrong_number"
        asked = [r for r in model.lane().requests if r.kind == "chat" and r.body.get("tools")]
        said = [m.get("content") for r in asked for m in r.body["messages"] if m.get("role") == "user"]
        assert "No, wrong number." in said  # the caller's recorded words, said again
        offered = {t["function"]["name"] for t in asked[0].body["tools"]}
        assert "not_the_patient" in offered and "wrong_person" not in offered  # the new version's
        assert res.exit_code == 1  # the engine's change counts

        model.lane().queue_reply([{"call": "wants_human", "args": {}}])  # a new prompt's effect
        res, doc = await check(recorded)
        assert doc["changed"] == 0 and doc["llm"]["changed"] == 1 and res.exit_code == 1
        (again,) = doc["llm"]["calls"]
        assert again["new_path"] == ["verify", "handoff"] and again["new_disposition"] == "callback"
        assert not again["path_same"] and not again["disposition_same"]
        res = await asyncio.to_thread(
            runner.invoke, app, ["flow", "check", str(recorded), "--last", "10", "--flow", flow_name, "--llm"]
        )
        assert res.exit_code == 1 and "with the model: 1 of 1 calls would change" in res.stdout
        assert f"{call.call_id}: with the model: CHANGED" in res.stdout


def test_flow_check_with_the_model_needs_a_flow_file_and_a_model() -> None:
    runner = CliRunner()
    args = ["flow", "check", "clinic@production", "--last", "3", "--flow", "x", "--llm"]
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and "--llm: FLOW must be a flow file" in res.stderr
    res = runner.invoke(
        app,
        ["flow", "check", str(FIXTURES / "clinic.yaml"), "--last", "3", "--flow", "x", "--llm"],
        env={"OPENAI_API_KEY": ""},
    )
    assert res.exit_code == 2 and "--llm needs OPENAI_API_KEY" in res.stderr
