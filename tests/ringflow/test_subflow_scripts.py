"""The verify_identity subflow, used by two flows (pharmacy_refill and billing_enquiry), played
as real calls.

Each script is played as a real call (``ringflow.simulation.simulator.run_script``: a real
``CallWorkflow``, a worker of this process, the agent in livekit-agents text mode, the LLM a
scripted HTTP endpoint), first uninterrupted, then with the agent killed in every turn
(``--kill-agent-at``). Every run must end like the uninterrupted one (path through the
subflow's nodes, the subflow's result under ``state.verify``, the calling flow's variables
with the subflow's outputs, end and disposition), and the caller must hear what the script
expects in order, each greeting once (the subflow's return is not a second greeting).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from ringflow.callflow.loader import load_flow
from ringflow.devstack import DevStack
from ringflow.simulation.scripts import load_script, said_failures
from ringflow.simulation.simulator import SimulationResult
from tests.support.killcases import differences, kill_in_every_turn, outcome
from tests.support.paths import ROOT
from tests.support.scriptenv import ScriptEnv, script_env

SCRIPTS = ROOT / "examples" / "scripts"
NAMES = sorted(
    p.name for pattern in ("pharmacy_refill_*.yaml", "billing_enquiry_*.yaml") for p in SCRIPTS.glob(pattern)
)
GREETINGS = ("Before we go on", "that's you confirmed", "Your balance is", "repeat is ready to order")

pytestmark = pytest.mark.timeout(400)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def env(temporal_server: DevStack) -> AsyncIterator[ScriptEnv]:
    async for e in script_env(temporal_server, SCRIPTS):
        yield e


def problems(result: SimulationResult, wanted: list[str], unwanted: list[str]) -> list[str]:
    """What the caller should have heard and did not, what they must not hear, greetings twice."""
    said = [t["text"] for t in result.transcript if t["role"] == "assistant"]
    out = [f"not said: {m}" for m in said_failures(wanted, unwanted, result.transcript)]
    out += [f"said {n} times: {g!r}" for g in GREETINGS if (n := sum(g in s for s in said)) > 1]
    return out


def test_one_subflow_is_used_by_two_flows() -> None:
    """The issue's bar: a subflow used by two flows (the same content in both definitions)."""
    flows = {load_script(SCRIPTS / name)[1] for name in NAMES}
    used = {load_flow(f).subflows["verify"].digest for f in flows}
    assert len(flows) == 2 and len(used) == 1


@pytest.mark.parametrize("name", NAMES)
async def test_a_subflow_returns_to_the_calling_flow_even_with_a_kill_in_any_turn(
    env: ScriptEnv, name: str
) -> None:
    script = load_script(SCRIPTS / name)[0]
    wanted, unwanted = script.expect.said or [], script.expect.not_said or []
    base = await env.play(name)
    assert base.ok, base.failures
    assert any(n.startswith("verify.") for n in base.path)
    assert not problems(base, wanted, unwanted), f"{problems(base, wanted, unwanted)}\n{base.transcript}"
    play = functools.partial(env.play, name)
    failures = await kill_in_every_turn(
        play, len(script.turns), base, lambda r: problems(r, wanted, unwanted)
    )
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("turn", [0, 1])  # into the subflow, out of it
async def test_a_kill_with_the_move_applied_but_not_yet_signalled_ends_the_call_the_same(
    env: ScriptEnv, turn: int
) -> None:
    """The agent dies right after its engine entered (or returned from) the subflow, before
    the transition's signal was queued: the next agent replays the turn from the workflow's
    state, frames included, and the call ends as the uninterrupted one."""
    name = "pharmacy_refill_verified.yaml"
    script = load_script(SCRIPTS / name)[0]
    base = await env.play(name)
    result = await env.play(name, kill_at=turn, kill_point="after_local_transition")
    assert result.kills == 1
    assert not differences(outcome(result), outcome(base)), differences(outcome(result), outcome(base))
    wanted, unwanted = script.expect.said or [], script.expect.not_said or []
    assert not problems(result, wanted, unwanted), (
        f"{problems(result, wanted, unwanted)}\n{result.transcript}"
    )
