"""Recorded calls replay on today's CallWorkflow: a deploy must not break calls in flight.

Temporal rebuilds a workflow's state by re-running its code against the recorded
history; if a change to ``workflows/`` (or to the engine) makes the code issue other
commands than it recorded, every call still running when the worker is upgraded gets
stuck. These tests catch that before a deploy. The histories come from real calls
(``tests/support/make_histories.py``); when one fails here, fix the code (``workflow.patched`` with
an id registered in ``workflows/patches.py``) rather than regenerating the file. No server
is needed: replay runs in-process.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.common import RawValue
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner
from temporalio.workflow import NondeterminismError

from ringflow.contract.records import CallRecord
from ringflow.workflows.call import CallWorkflow
from tests.support.paths import TESTS

HISTORIES = TESTS / "histories"
FILES = sorted(HISTORIES.glob("*.json"))


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(f"replay-{path.stem}", path.read_text())


def test_histories_cover_the_recorded_scenarios() -> None:
    """Guards against an empty folder silently turning the replay tests into no tests."""
    names = {p.stem for p in FILES}
    assert len(FILES) >= 5, f"expected recorded histories in {HISTORIES}, found {sorted(names)}"
    assert any(n.endswith("_run2") for n in names), "a continued-as-new run should be recorded"


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
async def test_history_replays_without_nondeterminism(path: Path) -> None:
    # The default sandboxed runner, as in production; activities are not run in replay,
    # so the flows' handler modules are never imported here.
    replayer = Replayer(workflows=[CallWorkflow], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(load(path), raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name} no longer replays: {result.replay_failure!r}"


@workflow.defn(name="CallWorkflow")
class SleepsFirstCallWorkflow(CallWorkflow):
    """CallWorkflow with one extra timer up front: a change that must not go unnoticed."""

    @workflow.run
    async def run(self, inp: RawValue) -> CallRecord:
        await workflow.sleep(timedelta(milliseconds=1))
        return await super().run(inp)


async def test_a_changed_command_sequence_is_caught() -> None:
    """Proves the replay tests have teeth: the same history, code that orders one more timer."""
    # Unsandboxed only because the sandbox would re-import this test module (and pytest).
    replayer = Replayer(
        workflows=[SleepsFirstCallWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    result = await replayer.replay_workflow(
        load(HISTORIES / "appointment_happy.json"), raise_on_replay_failure=False
    )
    assert isinstance(result.replay_failure, NondeterminismError), repr(result.replay_failure)
