"""A subflow with a handlers module of its own, used by a flow with its own: both modules
have a ``check``, with other arguments, and each node's runs from its own flow's module.

Each script is played as a real call (``ringflow.simulation.simulator.run_script``: a real
``CallWorkflow``, a worker of this process running the handlers, the agent in
livekit-agents text mode, the LLM a scripted HTTP endpoint), first uninterrupted, then with
the agent killed in every turn (``--kill-agent-at``). The state says which handler ran
(each writes its own ``checked_by``; the subflow's also whether the date matched, which
routes its end), and every killed run ends like the uninterrupted one.
"""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from ringflow.callflow.loader import load_flow
from ringflow.devstack import DevStack
from ringflow.simulation.scripts import load_script, said_failures
from ringflow.simulation.simulator import SimulationResult, flows_dir_with
from tests.support.killcases import kill_in_every_turn
from tests.support.paths import ROOT
from tests.support.scriptenv import ScriptEnv, script_env

FIXTURES = ROOT / "tests" / "fixtures" / "subflow_handlers"
SCRIPTS = FIXTURES / "scripts"
NAMES = sorted(p.name for p in SCRIPTS.glob("account_*.yaml"))

pytestmark = pytest.mark.timeout(400)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def env(temporal_server: DevStack) -> AsyncIterator[ScriptEnv]:
    async for e in script_env(temporal_server, SCRIPTS):
        yield e


def problems(result: SimulationResult, wanted: list[str]) -> list[str]:
    return [f"not said: {m}" for m in said_failures(wanted, None, result.transcript)]


def test_both_flows_have_a_handler_of_the_same_name_in_modules_of_the_same_name() -> None:
    definition = load_flow(FIXTURES / "account" / "flow.yaml")
    assert definition.flow.handlers == definition.subflows["verify"].handlers == "handlers"
    assert set(definition.handlers) == {"check", "verify.check"}
    assert list(definition.handlers["check"].parameters["properties"]) == ["account"]
    assert list(definition.handlers["verify.check"].parameters["properties"]) == ["date_of_birth"]


def test_call_simulate_trusts_the_used_flows_folder_as_the_flows() -> None:
    """``call simulate`` runs the handlers of the flows its scripts play: the used flow's
    module is beside the used file, another folder, trusted as well."""
    trusted = flows_dir_with(str(FIXTURES / "account"), [SCRIPTS / "account_verified.yaml"])
    assert str((FIXTURES / "verify_dob").resolve()) in trusted.split(os.pathsep)


@pytest.mark.parametrize("name", NAMES)
async def test_each_flows_handler_runs_from_its_own_module_even_with_a_kill_in_any_turn(
    env: ScriptEnv, name: str
) -> None:
    script = load_script(SCRIPTS / name)[0]
    wanted = script.expect.said or []
    base = await env.play(name)
    assert base.ok, base.failures
    assert base.state["checked_by"] == "account"
    assert base.state["verify"]["state"]["checked_by"] == "verify_dob"
    assert not problems(base, wanted), f"{problems(base, wanted)}\n{base.transcript}"
    play = functools.partial(env.play, name)
    failures = await kill_in_every_turn(play, len(script.turns), base, lambda r: problems(r, wanted))
    assert not failures, "\n".join(failures)
