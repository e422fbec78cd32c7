"""``ringflow`` starts without importing the stack it does not need (issue 24 §5).

Timing belongs to ``bench/cli.py``; here the promise behind it is checked: ``--help`` lists
every command without importing one (no Temporal SDK, no LiveKit, no pydantic models), and
``flow validate`` loads the flow model but nothing of Temporal's or LiveKit's, nor what only
some flows or only other commands need (jsonschema, asyncio, the engine's compiled flow). Each
runs the ``ringflow`` script's own entry point in a fresh interpreter, which reports the
modules it ended with as it exits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ringflow.cli import COMMANDS, load
from ringflow.devstack import DevStack
from tests.support.paths import ROOT, TESTS

# An exit handler, so that it reports whichever way ``entry_point`` leaves (``SystemExit``, or
# ``exit_now`` once the Temporal SDK is loaded, which runs the exit handlers too).
REPORT = """
import atexit, json, sys
sys.argv = ["ringflow", *sys.argv[1:]]
atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))
from ringflow.cli import entry_point
entry_point()
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
# What ``--help`` and ``flow validate`` of a flow of handlers (no ``parameters`` schema, no
# job group) do not need either: an event loop, the JSON Schema validator, the flow compiled
# for the engine and the job groups' state with the effects they start.
NOT_FOR_VALIDATING = (
    "asyncio",
    "jsonschema",
    "ringflow.callflow.compiled",
    "ringflow.callflow.jobs",
    "ringflow.callflow.effects",
    "ringflow.callflow.engine",
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
    modules = json.loads(proc.stderr.strip().splitlines()[-1])
    return proc.returncode, proc.stdout, set(modules)


def loaded(modules: set[str], roots: tuple[str, ...]) -> set[str]:
    return {m for m in modules if any(m == r or m.startswith(r + ".") for r in roots)}


def test_help_lists_every_command_and_imports_none() -> None:
    code, out, modules = modules_after("--help")
    assert code == 0
    assert all(name in out for name in COMMANDS), out
    heavy = loaded(
        modules, (*NEVER, *NOT_FOR_VALIDATING, "pydantic", "ringflow.callflow.loader", "ringflow.cli.call")
    )
    assert not heavy, heavy


def test_flow_validate_imports_nothing_of_temporal_or_livekit() -> None:
    code, out, modules = modules_after("flow", "validate", "examples/flows/appointment_reminder/flow.yaml")
    assert code == 0, out
    assert "ringflow.callflow.loader" in modules  # it did validate
    assert not loaded(modules, NEVER), loaded(modules, NEVER)


def test_flow_validate_loads_jsonschema_and_the_jobs_only_for_a_flow_that_has_them() -> None:
    """The example's functions take their parameters from its handlers: no schema to check
    against the meta-schema, no job group, no event loop. A flow that declares a broken
    ``parameters`` schema still has it checked, with jsonschema's message."""
    code, out, modules = modules_after("flow", "validate", "examples/flows/appointment_reminder/flow.yaml")
    assert code == 0, out
    assert not loaded(modules, NOT_FOR_VALIDATING), loaded(modules, NOT_FOR_VALIDATING)

    code, out, modules = modules_after(
        "flow", "validate", str(TESTS / "fixtures/flows/invalid/capture_bad_schema.yaml")
    )
    assert code == 1, out
    assert (
        "nodes.greet.functions[0].parameters.properties.size.type: not a valid JSON Schema: "
        "'integr' is not valid under any of the given schemas" in out
    ), out
    assert "jsonschema" in modules


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
# call's contract, any workflow code (the workflows' client included), and the flow store
# the payload codec reads a published definition from (SQLAlchemy with it) when a payload
# names one: a visibility query's answer names none.
NOT_FOR_READING = (
    "ringflow.workflows",
    "ringflow.callflow.loader",
    "ringflow.callflow.model",
    "ringflow.contract.call",
    "ringflow.activities.flow_store",
    "sqlalchemy",
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
