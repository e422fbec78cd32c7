"""Every command that prints results takes ``--json``; the long-running servers print logs,
not results, and are the only ones without it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from ringflow.cli import COMMANDS, app, load
from tests.support.paths import ROOT, TESTS

SERVERS = {"dev", "worker", "agent", "webhooks", "codec-server", "api"}
FLOW = ROOT / "examples" / "flows" / "appointment_reminder" / "flow.yaml"


def _leaves(command: Any, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], Any]]:
    subs = getattr(command, "commands", None)
    if subs:
        return [leaf for name, sub in subs.items() for leaf in _leaves(sub, (*path, name))]
    return [(path, command)]


def test_every_command_that_prints_results_takes_json() -> None:
    lacking = []
    for name in COMMANDS:
        for path, command in _leaves(load(name), (name,)):
            has = any("--json" in getattr(p, "opts", ()) for p in command.params)
            if not has and name not in SERVERS:
                lacking.append(" ".join(path))
    assert not lacking, f"no --json: {lacking}"


def _json(args: list[str]) -> Any:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_flow_show_graph_import_and_codec_key_print_json(tmp_path: Path) -> None:
    shown = _json(["flow", "show", str(FLOW), "--json"])
    assert shown["flow"] == "appointment_reminder" and shown["start"]
    assert {r["node"] for r in shown["rows"]} >= {shown["start"]}
    assert all(set(r) == {"node", "type", "function", "goes_to"} for r in shown["rows"])
    graph = _json(["flow", "graph", str(FLOW), "--json"])
    assert graph["mermaid"].startswith("flowchart")
    out = tmp_path / "bank.yaml"
    source = TESTS / "fixtures" / "import" / "pipecat_legacy_bank.json"
    imported = _json(["flow", "import", str(source), "-o", str(out), "--json"])
    assert (
        imported["source"] == "pipecat-legacy"
        and imported["written"] == str(out)
        and out.read_text() == imported["flow"]
    )
    key = _json(["codec-key", "--id", "k1", "--json"])
    assert key["id"] == "k1" and key["entry"].startswith("k1:")
