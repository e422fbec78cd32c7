"""Extracted values reach the live agent (issue 23 §1): scripts whose greetings, tasks,
speech and gates read a value extracted earlier, played as real calls (a real
``CallWorkflow``, the agent in text mode, the scripted LLM), uninterrupted and with the
agent killed in every turn.

Each script was written from a defect seen before the agent received extraction results:
``values_known_before`` (a node entered turns after ``tier`` was extracted greeted the
caller with "UNKNOWN plan", and its gate routed the agent to ``basic_end`` while the
workflow went to ``gold_end``), ``values_gate_waits`` and ``values_gate_filler`` (a gate
right after the extraction started routed both sides to ``basic_end``: nothing waited for
it). ``values_extraction_fails`` is the fallback: the extraction fails, both sides take the
gate's default. The extraction finishes before the gate (``values_known_before``), while
the gate waits (``extract_delay_s``), or never (``values_extraction_fails``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from ringflow.devstack import DevStack
from ringflow.simulation.scripts import load_script
from tests.support.killcases import differences, outcome
from tests.support.paths import TESTS
from tests.support.scriptenv import ScriptEnv, script_env

SCRIPTS = TESTS / "fixtures" / "values"
NAMES = sorted(p.name for p in SCRIPTS.glob("values_*.yaml"))

pytestmark = pytest.mark.timeout(300)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def env(temporal_server: DevStack) -> AsyncIterator[ScriptEnv]:
    async for e in script_env(temporal_server, SCRIPTS):
        yield e


@pytest.mark.parametrize("name", NAMES)
async def test_what_reads_an_extracted_value_hears_and_routes_as_the_record_says(
    env: ScriptEnv, name: str
) -> None:
    """Each script's own ``expect`` (path, disposition, ``said``, ``not_said``), then the
    same script with the agent killed in each turn: the same path, end and words."""
    base = await env.play(name)
    assert base.ok, f"{base.failures}\n{base.transcript}\n{base.rejected}"
    prompts = [
        str(m.get("content"))
        for r in env.llm.lane(base.call_id).requests
        for m in r.messages
        if m.get("role") == "system"
    ]
    assert prompts and not [p for p in prompts if "UNKNOWN" in p], prompts  # the task read it too
    if "noted" in base.path:
        assert any("hear about gold upgrades" in p for p in prompts), prompts
    script, _ = load_script(SCRIPTS / name)
    failures: list[str] = []
    for turn in range(len(script.turns)):
        result = await env.play(name, kill_at=turn)
        if result.kills != 1:
            failures.append(f"turn {turn}: no kill")
        failures += [f"kill in turn {turn}: {d}" for d in differences(outcome(result), outcome(base))]
        failures += [f"kill in turn {turn}: {f}" for f in result.failures]
    assert not failures, "\n".join(failures)
