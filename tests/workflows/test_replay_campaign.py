"""The campaign workflow replays its recorded histories (``tests/support/make_campaign_history.py``):
a change that issues other commands for the same events must be guarded by
``workflow.patched`` with a registered id, like CallWorkflow's (``tests/workflows/test_replay.py``)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner
from temporalio.workflow import NondeterminismError

from ringflow.workflows.call import CallWorkflow
from ringflow.workflows.campaign import CampaignWorkflow
from ringflow.workflows.campaign_messages import CampaignInput
from tests.support.paths import TESTS

FILES = sorted((TESTS / "histories" / "campaign").glob("*.json"))


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(f"replay-{path.stem}", path.read_text())


def test_a_first_run_and_a_continued_run_are_recorded() -> None:
    """One campaign, recorded on this release: its first run and at least one continued run."""
    stems = [p.stem for p in FILES]
    assert stems[:2] == ["campaign_run1", "campaign_run2"], stems
    assert all(s.startswith("campaign_run") for s in stems), stems


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
async def test_campaign_history_replays_without_nondeterminism(path: Path) -> None:
    replayer = Replayer(workflows=[CampaignWorkflow, CallWorkflow], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(load(path), raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name} no longer replays: {result.replay_failure!r}"


@workflow.defn(name="CampaignWorkflow")
class SleepsFirstCampaignWorkflow(CampaignWorkflow):
    """A campaign with one more timer up front: a changed command sequence must be noticed."""

    @workflow.run
    async def run(self, inp: CampaignInput) -> dict:  # type: ignore[type-arg]
        await workflow.sleep(timedelta(milliseconds=1))
        return await super().run(inp)


async def test_a_changed_campaign_is_caught_by_the_replay() -> None:
    # Unsandboxed only because the sandbox would re-import this test module (and pytest).
    replayer = Replayer(
        workflows=[SleepsFirstCampaignWorkflow, CallWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    result = await replayer.replay_workflow(load(FILES[0]), raise_on_replay_failure=False)
    assert isinstance(result.replay_failure, NondeterminismError), repr(result.replay_failure)
