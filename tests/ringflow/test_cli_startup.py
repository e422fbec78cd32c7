"""``ringflow`` starts without importing the stack it does not need (issue 24 §5).

Timing belongs to ``bench/cli.py``; here the promise behind it is checked: ``--help`` lists
every command without importing one (no Temporal SDK, no LiveKit, no pydantic models), and
``flow validate`` loads the flow model but nothing of Temporal's or LiveKit's. Each runs in
a fresh interpreter, which reports the modules it ended with.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ringflow.cli import COMMANDS, load
from ringflow.devstack import DevStack
from tests.support.paths import ROOT

REPORT = """
import json, sys
sys.argv = ["ringflow", *sys.argv[1:]]
from ringflow.cli import main
try:
    main()
except SystemExit as done:
    code = done.code
else:
    code = 0
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""
NEVER = (
    "temporalio",
    "livekit",
    "ringflow.workflows",
    "ringflow.activities",
    "ringflow.agents",
    "ringflow.simulation",
    "openai",
)


def modules_after(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, set[str]]:
    proc = subprocess.run(
        [sys.executable, "-c", REPORT, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    return report["code"], proc.stdout, set(report["modules"])


def loaded(modules: set[str], roots: tuple[str, ...]) -> set[str]:
    return {m for m in modules if any(m == r or m.startswith(r + ".") for r in roots)}


def test_help_lists_every_command_and_imports_none() -> None:
    code, out, modules = modules_after("--help")
    assert code == 0
    assert all(name in out for name in COMMANDS), out
    heavy = loaded(modules, (*NEVER, "pydantic", "ringflow.callflow.loader", "ringflow.cli.call"))
    assert not heavy, heavy


def test_flow_validate_imports_nothing_of_temporal_or_livekit() -> None:
    code, out, modules = modules_after("flow", "validate", "examples/flows/appointment_reminder/flow.yaml")
    assert code == 0, out
    assert "ringflow.callflow.loader" in modules  # it did validate
    assert not loaded(modules, NEVER), loaded(modules, NEVER)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_listing_says_what_each_command_says(name: str) -> None:
    """The help ``--help`` shows without importing a command is that command's own."""
    real = load(name)
    assert real.name == name
    listed = COMMANDS[name].help
    assert real.get_short_help_str(limit=1000) == listed, (
        f"{name}: update COMMANDS in ringflow/cli/__init__.py"
    )


# What a command that only reads Temporal may not load: the flow model and its loader, the
# call's contract, any workflow code (the workflows' client included).
NOT_FOR_READING = (
    "ringflow.workflows",
    "ringflow.callflow.loader",
    "ringflow.contract.call",
    "livekit",
    "openai",
)


@pytest.mark.parametrize("args", [("call", "--help"), ("call", "list", "--help"), ("campaign", "--help")])
def test_a_group_s_help_imports_no_sdk_and_no_workflow(args: tuple[str, ...]) -> None:
    """``ringflow call`` mounts every call command (``dial`` from ``cli/sip.py`` too), and
    ``campaign`` every campaign one: their modules import what a command needs in its body."""
    code, out, modules = modules_after(*args)
    assert code == 0
    assert "Usage:" in out
    assert not loaded(modules, NEVER), loaded(modules, NEVER)


def test_call_list_loads_the_client_not_the_flow_model(temporal_server: DevStack) -> None:
    env = {"RINGFLOW_TEMPORAL_ADDRESS": temporal_server.address, "RINGFLOW_TEMPORAL_NAMESPACE": "default"}
    code, out, modules = modules_after(
        "call", "list", "--json", "--status", "live", "--flow", "no-such-flow", env=env
    )
    assert code == 0, out
    assert json.loads(out) == []  # it did ask Temporal
    assert "temporalio.client" in modules
    assert not loaded(modules, NOT_FOR_READING), loaded(modules, NOT_FOR_READING)


def test_campaign_status_loads_no_workflow_code(temporal_server: DevStack) -> None:
    env = {"RINGFLOW_TEMPORAL_ADDRESS": temporal_server.address, "RINGFLOW_TEMPORAL_NAMESPACE": "default"}
    code, _, modules = modules_after("campaign", "status", "no-such-campaign", env=env)
    assert code == 1  # Temporal answered: no such workflow
    assert "temporalio.client" in modules
    assert not loaded(modules, ("ringflow.workflows", "temporalio.worker")), loaded(
        modules, ("ringflow.workflows",)
    )
