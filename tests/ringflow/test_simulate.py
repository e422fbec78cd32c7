"""``ringflow call simulate``: scripts as real calls, expectations, and the lost-agent path."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from aiohttp import web
from typer.testing import CliRunner

from ringflow.cli import app
from ringflow.devstack import DevStack
from ringflow.simulation.report import text_report
from ringflow.simulation.scripts import Expect, ScriptError, check, load_script, matches
from ringflow.simulation.simulator import environment, run_script, simulate
from tests.support.paths import ROOT

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


async def test_a_kill_past_the_last_turn_is_an_error_not_a_pass(temporal_server: DevStack) -> None:
    """``--kill-agent-at N`` with no turn N would kill nothing and report the script ok."""
    script = SCRIPTS / "appointment_reminder_confirmed.yaml"
    turns = len(load_script(script)[0].turns)
    res = CliRunner().invoke(
        app, ["call", "simulate", "--address", "127.0.0.1:9", "--kill-agent-at", str(turns), str(script)]
    )
    assert res.exit_code == 2, res.output
    assert f"--kill-agent-at {turns}: the script has {turns} turns (turns 0 to {turns - 1})" in res.output
    [result] = await simulate([script], address=temporal_server.address, kill_at=turns)
    [negative] = await simulate([script], address=temporal_server.address, kill_at=-1)
    assert not result.ok and result.kills == 0
    assert (
        result.error
        == f"{script}: --kill-agent-at {turns}: the script has {turns} turns (turns 0 to {turns - 1})"
    )
    assert not negative.ok and negative.error is not None and "--kill-agent-at -1" in negative.error


STOCK_FLOW = """
flow: stock-check
variables:
  api: {type: string, required: true}
nodes:
  start:
    task: Check the stock.
    functions:
      - name: check_stock
        description: Check the stock.
        http: {method: GET, url: "{{api}}/stock", timeout_s: 3}
        transition_to: {field: status, cases: {in_stock: served}, default: refused}
  served: {type: end, task: Say it is in stock., disposition: served}
  refused: {type: end, task: Apologise., disposition: refused}
"""


def _stock_script(api: str, allow: list[str] | None) -> str:
    return json.dumps(
        {
            "flow": "flow.yaml",
            "variables": {"api": api},
            **({"allow_private": allow} if allow is not None else {}),
            "turns": [{"user": "Is it in stock?", "llm": [{"call": "check_stock"}, {"say": "Here."}]}],
        }
    )


async def test_http_entries_reach_only_the_private_addresses_a_script_declares(
    temporal_server: DevStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The simulator turned the private-address guard off for every HTTP entry: a flow
    passed here and was refused by a worker. Now it guards as a worker does, lets through
    exactly the script's ``allow_private``, and says so in the result."""
    monkeypatch.delenv("RINGFLOW_HTTP_ALLOW_PRIVATE", raising=False)
    hits: list[str] = []

    async def stock(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.json_response({"status": "in_stock"})

    server = web.Application()
    server.router.add_get("/stock", stock)
    runner = web.AppRunner(server)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    api = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    (tmp_path / "flow.yaml").write_text(STOCK_FLOW)
    scripts = {}
    for name, allow in (("declared", ["127.0.0.1"]), ("undeclared", None), ("other", ["10.0.0.0/8", "::1"])):
        scripts[name] = tmp_path / f"{name}.yaml"
        scripts[name].write_text(_stock_script(api, allow))
    try:
        async with environment(temporal_server.address) as (client, task_queue, llm, _):
            results = {n: await run_script(p, client, task_queue, llm) for n, p in scripts.items()}
    finally:
        await runner.cleanup()
    assert hits == ["/stock"]  # only the declared script's request was sent
    declared = results["declared"]
    assert declared.disposition == "served" and declared.allow_private == ["127.0.0.1"]
    said = "let through to 127.0.0.1 (the script's allow_private)"
    assert any(said in line for line in text_report(declared))
    for name in ("undeclared", "other"):
        r = results[name]
        assert r.error is None and r.disposition == "refused", (name, r)
    assert not any("let through" in line for line in text_report(results["undeclared"]))
    (tmp_path / "host.yaml").write_text(_stock_script(api, ["localhost"]))
    with pytest.raises(ScriptError, match="'localhost' is not an IP address"):
        load_script(tmp_path / "host.yaml")
