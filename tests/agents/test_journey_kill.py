"""An agent killed during a journey follow-up's first turn: the new agent resumes the call
where the journey started it (its node, the journey's state and context), and the call ends
as the uninterrupted one does. Real CallWorkflow and agent (livekit-agents text mode), the
LLM a scripted endpoint (``ringflow.simulation.simulator.run_script``)."""

from __future__ import annotations

import pytest

from ringflow.callflow.journey import JourneyContext, JourneyStart
from ringflow.devstack import DevStack
from ringflow.simulation.simulator import environment, run_script
from tests.support.paths import TESTS

SCRIPT = TESTS / "fixtures" / "scripts" / "journey_check_in.yaml"
START = JourneyStart(
    context=JourneyContext(
        journey_id="journey-check_in-test",
        call=2,
        context="- call 1 (outbound): ended completed at goodbye, disposition follow_up",
        say="Calling back as promised.",
    ),
    node="check_in",
    state={"calls_before": 1},
)

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("point", ["turn:user", "tool_call", "after_local_transition"])
async def test_a_kill_in_a_follow_ups_first_turn_resumes_on_the_journeys_node_and_state(
    temporal_server: DevStack, point: str
) -> None:
    async with environment(temporal_server.address) as (client, task_queue, llm, _):
        base = await run_script(SCRIPT, client, task_queue, llm, journey=START)
        killed = await run_script(SCRIPT, client, task_queue, llm, journey=START, kill_at=0, kill_point=point)
    assert base.ok, base.failures
    assert killed.ok, killed.failures
    assert killed.kills == 1  # the first turn's kill point was reached
    assert (killed.path, killed.state, killed.disposition) == (base.path, base.state, base.disposition)
    assert killed.path[0] == "check_in" and killed.state == {"calls_before": 1}
