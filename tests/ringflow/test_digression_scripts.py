"""The clinic_front_desk example's scripts: digressions into global nodes and back, played as
real calls.

Each script is played as a real call (``ringflow.simulation.simulator.run_script``: a real
``CallWorkflow``, a worker of this process, the agent in livekit-agents text mode, the LLM a
scripted HTTP endpoint), first uninterrupted, then with the agent killed in every turn
(``--kill-agent-at``). Every run must end like the uninterrupted one (path, state, end), and
the caller must hear everything the script expects in order: each detour's answer, each
"as I was saying" return, and never a node's greeting a second time.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from ringflow.devstack import DevStack
from ringflow.simulation.scripts import load_script, said_failures
from ringflow.simulation.simulator import SimulationResult
from tests.support.killcases import differences, kill_in_every_turn, outcome
from tests.support.paths import ROOT
from tests.support.scriptenv import ScriptEnv, script_env

SCRIPTS = ROOT / "examples" / "scripts"
NAMES = sorted(p.name for p in SCRIPTS.glob("clinic_front_desk_*.yaml"))
GREETINGS = ("Hello, this is Northside Clinic", "Our next free slot is", "Shall I book Tuesday at ten")

pytestmark = pytest.mark.timeout(400)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def env(temporal_server: DevStack) -> AsyncIterator[ScriptEnv]:
    async for e in script_env(temporal_server, SCRIPTS):
        yield e


def problems(result: SimulationResult, wanted: list[str]) -> list[str]:
    """What the caller should have heard and did not, and greetings heard twice."""
    said = [t["text"] for t in result.transcript if t["role"] == "assistant"]
    out = [f"not said: {m}" for m in said_failures(wanted, None, result.transcript)]
    out += [f"said {n} times: {g!r}" for g in GREETINGS if (n := sum(g in s for s in said)) > 1]
    return out


def test_the_scripts_digress_on_three_different_nodes() -> None:
    """The issue's bar: a digression and return on three different nodes, in one script."""
    path = load_script(SCRIPTS / "clinic_front_desk_digressions.yaml")[0].expect.path or []
    origins = {
        a for a, g, b in zip(path, path[1:], path[2:], strict=False) if g in ("hours", "robot") and a == b
    }
    assert origins == {"ask_name", "offer", "confirm"}


@pytest.mark.parametrize("name", NAMES)
async def test_digressions_return_where_the_call_was_even_with_a_kill_in_any_turn(
    env: ScriptEnv, name: str
) -> None:
    wanted = load_script(SCRIPTS / name)[0].expect.said or []
    base = await env.play(name)
    assert base.ok, base.failures
    assert not problems(base, wanted), f"{problems(base, wanted)}\n{base.transcript}"
    turns = len(load_script(SCRIPTS / name)[0].turns)
    play = functools.partial(env.play, name)
    failures = await kill_in_every_turn(play, turns, base, lambda r: problems(r, wanted))
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("turn", [0, 1, 4])  # into hours, go_back from it, go_back from robot
async def test_a_kill_with_the_digression_applied_but_not_yet_signalled_ends_the_call_the_same(
    env: ScriptEnv, turn: int
) -> None:
    """The agent dies right after its engine entered (or left) a global node, before the
    transition's signal was queued: the next agent replays the turn from the workflow's return
    stack, and the call ends as the uninterrupted one, every greeting said once."""
    name = "clinic_front_desk_digressions.yaml"
    wanted = load_script(SCRIPTS / name)[0].expect.said or []
    base = await env.play(name)
    result = await env.play(name, kill_at=turn, kill_point="after_local_transition")
    assert result.kills == 1
    assert not differences(outcome(result), outcome(base)), differences(outcome(result), outcome(base))
    assert not problems(result, wanted), f"{problems(result, wanted)}\n{result.transcript}"
