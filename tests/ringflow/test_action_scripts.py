"""The order_status example's scripts: calls routed by action nodes, checked for what was said.

Each script is played as a real call (``ringflow.simulation.simulator.run_script``: a real
``CallWorkflow``, a worker of this process, the agent in livekit-agents text mode, the LLM
a scripted HTTP endpoint), first uninterrupted, then with the agent killed in every turn
(``--kill-agent-at``) and at the kill points around action nodes: a transition into an
action node applied but not yet signalled, a handler whose result routes through an action
node. Every run must end like the uninterrupted one, and the caller must have heard, in
order, everything on the way (each script's ``expect.said``): the greeting built from the
pre-call lookup, transition speech, the routed node's ``tts_say`` and first turn, an end
node's last turn.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio

from ringflow.activities.persistence import dispose_engines
from ringflow.devstack import DevStack
from ringflow.simulation.scripted_llm import ScriptedLLM
from ringflow.simulation.scripts import load_script, said_failures
from ringflow.simulation.simulator import SimulationResult, environment, run_script
from tests.support.killcases import differences, fresh_handlers, kill_in_every_turn, outcome
from tests.support.paths import ROOT

SCRIPTS = ROOT / "examples" / "scripts"
NAMES = sorted(p.name for p in SCRIPTS.glob("order_status_*.yaml"))
# Kill points a turn of these scripts reaches besides the first one (the turn's own start).
POINTS: dict[str, list[tuple[int, str]]] = {
    "order_status_tracking.yaml": [(0, "after_local_transition"), (1, "after_local_transition")],
    "order_status_refund.yaml": [(0, "during_function"), (0, "after_function")],
    "order_status_lost.yaml": [(0, "after_local_transition")],
}

pytestmark = pytest.mark.timeout(300)


def said(name: str) -> list[str]:
    """The script's ``expect.said``: what the caller must hear, in this order."""
    wanted = load_script(SCRIPTS / name)[0].expect.said
    assert wanted, f"{name} has no expect.said"
    return wanted


def unsaid(result: SimulationResult, wanted: list[str]) -> list[str]:
    """What of ``wanted`` the caller did not hear in that order (the scripts' own rule)."""
    return said_failures(wanted, None, result.transcript)


@dataclass
class Env:
    client: Any
    task_queue: str
    llm: ScriptedLLM
    baselines: dict[str, dict[str, Any]] = field(default_factory=dict)

    async def play(self, name: str, **kw: Any) -> SimulationResult:
        path = SCRIPTS / name
        fresh_handlers(path)
        return await run_script(path, self.client, self.task_queue, self.llm, **kw)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def env(temporal_server: DevStack) -> AsyncIterator[Env]:
    if not temporal_server.running:
        await temporal_server.start()
    try:
        async with environment(temporal_server.address) as (client, task_queue, llm, _):
            yield Env(client, task_queue, llm)
    finally:
        dispose_engines()


@pytest.mark.parametrize("name", NAMES)
async def test_action_node_scripts_say_everything_on_the_way_even_with_a_kill_in_any_turn(
    env: Env, name: str
) -> None:
    base = await env.play(name)
    assert base.ok, base.failures
    assert not unsaid(base, said(name)), f"not said: {unsaid(base, said(name))}\n{base.transcript}"
    script, _ = load_script(SCRIPTS / name)
    heard = lambda r: [f"not said {m}" for m in [unsaid(r, said(name))] if m]  # noqa: E731
    failures = await kill_in_every_turn(lambda **kw: env.play(name, **kw), len(script.turns), base, heard)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(
    ("name", "turn", "point"), [(n, t, p) for n, cases in sorted(POINTS.items()) for t, p in cases]
)
async def test_a_kill_around_an_action_node_ends_the_call_the_same(
    env: Env, name: str, turn: int, point: str
) -> None:
    """The agent dies with the transition into an action node applied but unsent, or while
    (or just after) the workflow ran a handler whose result routed through an action node:
    the new agent ends the call as the uninterrupted one did, and an end node's last turn is
    said. (Speech the dead agent had queued but not spoken dies with it, as on a real crash.)"""
    base = await env.play(name)
    result = await env.play(name, kill_at=turn, kill_point=point)
    assert result.kills == 1
    assert not differences(outcome(result), outcome(base)), differences(outcome(result), outcome(base))
    last = [t["text"] for t in result.transcript if t["role"] == "assistant" and t["node"] == base.path[-1]]
    assert last and not unsaid(result, said(name)[-1:]), result.transcript
