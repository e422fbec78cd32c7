"""An answer grounded in an ingested document, played as a real call (issue 32, §3).

``examples/scripts/clinic_knowledge_answers.yaml`` runs on the clinic_knowledge flow: the
simulator ingests the flow's four documents into its worker's database (the real MiniLM
model, SQLite with sqlite-vec), the scripted LLM calls ``search_knowledge``, and the workflow
runs the ``kb_search`` local activity. The passages holding the facts the bot then says
reach the LLM as the tool's result, the transcript records each search as a ``tool`` turn
with its sources, and a kill of the agent in any turn changes nothing.
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from ringflow.devstack import DevStack
from ringflow.simulation.scripts import load_script, said_failures
from ringflow.simulation.simulator import SimulationResult
from tests.support.killcases import kill_in_every_turn
from tests.support.paths import ROOT
from tests.support.scriptenv import ScriptEnv, script_env

SCRIPTS = ROOT / "examples" / "scripts"
NAME = "clinic_knowledge_answers.yaml"
NAMES = sorted(p.name for p in SCRIPTS.glob("clinic_knowledge_*.yaml"))

pytestmark = pytest.mark.timeout(400)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def env(temporal_server: DevStack) -> AsyncIterator[ScriptEnv]:
    async for e in script_env(temporal_server, SCRIPTS):
        yield e


def heard(result: SimulationResult, name: str = NAME) -> list[str]:
    wanted = load_script(SCRIPTS / name)[0].expect.said or []
    return [f"not said: {m}" for m in said_failures(wanted, None, result.transcript)]


def tool_results(env: ScriptEnv) -> list[str]:
    """What the LLM was given back for its calls (the tool messages of its requests)."""
    out: list[str] = []
    for rec in env.llm.requests:
        for m in rec.body.get("messages", []):
            if m.get("role") == "tool":
                content = m.get("content")
                out.append(content if isinstance(content, str) else json.dumps(content))
    return out


async def test_the_answer_comes_from_the_ingested_documents(env: ScriptEnv) -> None:
    env.llm.requests.clear()
    result = await env.play(NAME)
    assert result.ok, (result.failures, result.error, result.transcript)
    given = tool_results(env)
    assert any("300 dollars" in t and "prices.csv" in t for t in given), given
    assert any("closed at the weekend" in t and "clinic.md" in t for t in given), given
    searches = [t for t in result.transcript if t["role"] == "tool"]
    assert len(searches) == 2, result.transcript
    assert "prices.csv#" in searches[0]["text"] and "clinic.md#" in searches[1]["text"]
    assert all(t["node"] == "answer" for t in searches)


async def test_the_pdf_answers_the_denture_question(env: ScriptEnv) -> None:
    env.llm.requests.clear()
    result = await env.play("clinic_knowledge_dentures.yaml")
    assert result.ok, (result.failures, result.error)
    assert any("three working days" in t and "dentures" in t for t in tool_results(env))
    (search,) = [t for t in result.transcript if t["role"] == "tool"]
    assert search["text"].split(": ", 1)[1].startswith("dentures#0")


@pytest.mark.parametrize("name", NAMES)
async def test_a_kill_in_any_turn_ends_the_call_the_same(env: ScriptEnv, name: str) -> None:
    base = await env.play(name)
    assert base.ok, base.failures
    turns = len(load_script(SCRIPTS / name)[0].turns)
    check = functools.partial(heard, name=name)
    failures = await kill_in_every_turn(functools.partial(env.play, name), turns, base, check)
    assert not failures, "\n".join(failures)
