"""``ringflow call simulate``: scripts as real calls, expectations, and the lost-agent path."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from ringflow.cli import app
from ringflow.devstack import DevStack
from ringflow.simulation.scripts import Expect, check, matches
from ringflow.simulation.simulator import environment, run_script

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "examples" / "scripts"


async def test_every_example_script_passes(temporal_server: DevStack) -> None:
    async with environment(temporal_server.address) as (client, task_queue, llm, _):
        results = [await run_script(p, client, task_queue, llm) for p in sorted(SCRIPTS.glob("*.yaml"))]
    assert len(results) >= 8
    failed = {r.script: r.failures for r in results if not r.ok}
    assert not failed


async def test_a_killed_agent_is_replaced_through_the_workflow(temporal_server: DevStack) -> None:
    """The production path: the workflow notices the silence, dispatches (locally here),
    the new agent attaches and the call ends as an uninterrupted one would."""
    script = SCRIPTS / "appointment_reminder_reschedule.yaml"
    async with environment(temporal_server.address) as (client, task_queue, llm, _):
        base = await run_script(script, client, task_queue, llm)
        killed = await run_script(script, client, task_queue, llm, kill_at=3, resume="dispatch")
        from ringflow.workflows.client import CallHandle

        state = await CallHandle(client, killed.call_id).state()
    assert killed.kills == 1 and killed.ok
    assert (killed.path, killed.state, killed.variables) == (base.path, base.state, base.variables)
    assert any("agent_lost" in r.reason for r in state.rejected)


def test_expectations_match_the_spec_rules() -> None:
    assert matches({"a": {"b": 1}}, {"a": {"b": 1.0, "c": 2}}) == []  # subset, numbers by value
    assert matches([1, 2], [1, 2, 3])  # lists must be equal
    assert matches(True, 1)  # a boolean is not a number
    assert check(Expect(path=["a"], end_reason="completed"), {"path": ["a"], "end_reason": "user_idle"}) == [
        "end_reason: expected 'completed', got 'user_idle'"
    ]


def test_cli_exit_codes(temporal_server: DevStack, tmp_path: Path) -> None:
    flow_dir = tmp_path / "flows" / "appointment_reminder"
    shutil.copytree(ROOT / "examples" / "flows" / "appointment_reminder", flow_dir)
    good = (SCRIPTS / "appointment_reminder_confirmed.yaml").read_text()
    good = good.replace("../flows/", "flows/")
    (tmp_path / "good.yaml").write_text(good)
    (tmp_path / "bad.yaml").write_text(good.replace("disposition: confirmed", "disposition: nope"))
    (tmp_path / "broken.yaml").write_text("flow: flows/appointment_reminder/flow.yaml\nturns: 3\n")
    runner = CliRunner()
    addr = ["--address", temporal_server.address]
    ok = runner.invoke(
        app, ["call", "simulate", *addr, "--json", str(tmp_path / "good.yaml"), str(flow_dir / "flow.yaml")]
    )
    assert ok.exit_code == 0, ok.output
    lines = [json.loads(line) for line in ok.stdout.splitlines() if line.startswith("{")]
    assert lines[0]["ok"] and lines[0]["disposition"] == "confirmed" and lines[0]["workflow_id"]
    bad = runner.invoke(app, ["call", "simulate", *addr, str(tmp_path / "bad.yaml")])
    assert bad.exit_code == 1 and "disposition: expected 'nope'" in bad.output
    broken = runner.invoke(app, ["call", "simulate", *addr, str(tmp_path / "broken.yaml")])
    assert broken.exit_code == 2 and "turns" in broken.output
