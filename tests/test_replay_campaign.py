"""The campaign workflow replays its recorded histories (``tests/make_campaign_history.py``):
a change that issues other commands for the same events must be guarded by
``workflow.patched``, like CallWorkflow's (``tests/test_replay.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from ringflow.workflows.call import CallWorkflow
from ringflow.workflows.campaign import CampaignWorkflow
from ringflow.workflows.campaign_messages import CampaignInput

FILES = sorted((Path(__file__).parent / "histories" / "campaign").glob("*.json"))


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(f"replay-{path.stem}", path.read_text())


def test_a_first_run_and_a_continued_run_are_recorded() -> None:
    """Of each loop: the first (one activity per attempt step), the rounds, and the rounds
    whose calls dial at their slot (campaign-slots-v1)."""
    assert [p.stem for p in FILES] == [
        "campaign_rounds_run1",
        "campaign_rounds_run2",
        "campaign_run1",
        "campaign_run2",
        "campaign_slots_run1",
        "campaign_slots_run2",
    ]


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
async def test_campaign_history_replays_without_nondeterminism(path: Path) -> None:
    replayer = Replayer(workflows=[CampaignWorkflow, CallWorkflow], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(load(path), raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name} no longer replays: {result.replay_failure!r}"


@workflow.defn(name="CampaignWorkflow")
class ClaimsTwiceCampaignWorkflow(CampaignWorkflow):
    """A campaign that claims once more up front: a changed command sequence must be noticed."""

    @workflow.run
    async def run(self, inp: CampaignInput) -> dict:  # type: ignore[type-arg]
        await self.claim(1)
        return await super().run(inp)


async def test_a_changed_campaign_is_caught_by_the_replay() -> None:
    replayer = Replayer(
        workflows=[ClaimsTwiceCampaignWorkflow, CallWorkflow], data_converter=pydantic_data_converter
    )
    result = await replayer.replay_workflow(load(FILES[0]), raise_on_replay_failure=False)
    assert result.replay_failure is not None
