"""An answer grounded in an ingested document, played as a real call (issue 32, §3).

``examples/scripts/clinic_knowledge_answers.yaml`` runs on the clinic_knowledge flow: the
simulator ingests the flow's four documents into its worker's database (the real MiniLM
model, SQLite with sqlite-vec), the scripted LLM calls ``search_knowledge``, and the workflow
runs the ``kb_search`` local activity. The passages holding the facts the bot then says
reach the LLM as the tool's result, the transcript records each search as a ``tool`` turn
with its sources, and a kill of the agent in any turn changes nothing.

``clinic_knowledge_auto.yaml`` plays ``auto_search.yaml``, whose node searches on each caller
turn by itself (``knowledge:`` on the node): the LLM, offered no search tool, reads the
passages found for the turn it answers.
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from ringflow.agents.flow_agent import RETRIEVAL_NOTE
from ringflow.callflow.knowledge import RETRIEVAL_FUNCTION
from ringflow.callflow.loader import load_flow
from ringflow.callflow.state import CallState
from ringflow.devstack import DevStack
from ringflow.simulation.knowledge import ingest_for_script
from ringflow.simulation.scripted_llm import RecordedRequest
from ringflow.simulation.scripts import load_script, said_failures
from ringflow.simulation.simulator import SimulationResult
from tests.support.agentkit import TextCall, say, text_call
from tests.support.killcases import kill_in_every_turn
from tests.support.paths import ROOT
from tests.support.scriptenv import ScriptEnv, script_env

SCRIPTS = ROOT / "examples" / "scripts"
AUTO_FLOW = ROOT / "examples" / "flows" / "clinic_knowledge" / "auto_search.yaml"
NAME = "clinic_knowledge_answers.yaml"
AUTO = "clinic_knowledge_auto.yaml"
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


def notes(req: RecordedRequest) -> list[str]:
    """The retrieval's passages the LLM read in one request (system messages after the prompt)."""
    return [
        str(m.get("content"))
        for m in req.messages[1:]
        if m.get("role") == "system" and str(m.get("content")).startswith(RETRIEVAL_NOTE)
    ]


async def test_each_caller_turn_is_answered_from_the_passages_found_for_it(env: ScriptEnv) -> None:
    """No search tool: the node searches with the caller's words before the LLM answers; the
    LLM reads that turn's passages and no earlier turn's, and the record cites each search."""
    before = len(env.llm.requests)
    result = await env.play(AUTO)
    assert result.ok, (result.failures, result.error, result.transcript)
    chats = [r for r in env.llm.requests[before:] if r.body.get("messages")]
    read = [notes(r) for r in chats]
    # one turn's passages each time, never kept; none on the end node, which has no retrieval
    assert [len(n) for n in read] == [1, 1, 1, 0], read
    assert "300 dollars" in read[0][0] and "[prices.csv#" in read[0][0], read
    assert "closed at the weekend" in read[1][0] and "[clinic.md#" in read[1][0], read
    offered = {t.get("function", {}).get("name") for r in chats for t in r.body.get("tools") or []}
    assert RETRIEVAL_FUNCTION not in offered and "finish" in offered, offered
    searches = [t for t in result.transcript if t["role"] == "tool"]
    asked = ["How much is teeth whitening?", "And are you open on Saturdays?", "Thanks, that's all."]
    assert len(searches) == len(asked), searches
    for turn, q in zip(searches, asked, strict=True):
        assert turn["text"].startswith(f"knowledge search '{q}' (version "), searches
    assert "prices.csv#" in searches[0]["text"] and "clinic.md#" in searches[1]["text"]
    roles = [t["role"] for t in result.transcript]
    assert roles[1:4] == ["user", "tool", "assistant"], roles  # the search follows its turn


async def workflow_state(tc: TextCall) -> CallState:
    await tc.synced()
    state: CallState = await tc.call.handle.query("call_state", result_type=CallState)
    return state


async def test_the_agent_and_the_workflow_agree_after_a_retrieved_turn(env: ScriptEnv) -> None:
    await ingest_for_script(AUTO_FLOW, env.task_queue)
    async with text_call(env.client, env.task_queue, env.llm, definition=load_flow(AUTO_FLOW)) as tc:
        for question, answer in [
            ("How much is teeth whitening?", "It is 300 dollars."),
            ("And are you open on Saturdays?", "We're closed at the weekend."),
        ]:
            tc.reply(say(answer))
            await tc.user(question)
            wf = await workflow_state(tc)
            assert wf.model_dump() == tc.controller.state.model_dump()
            assert not wf.pending and wf.node == "answer"
        transcript = await tc.call.transcript()
        assert [t.role for t in transcript] == ["assistant", *["user", "tool", "assistant"] * 2]


@pytest.mark.parametrize("turn", [0, 1])
async def test_an_agent_killed_during_the_search_resumes_the_turn_searched_once(
    env: ScriptEnv, turn: int
) -> None:
    """Killed once the workflow ran the search, before its passages reached the LLM: the new
    agent replays the turn, gets the workflow's first answer (no second search, no second
    ``tool`` turn) and answers the caller once."""
    result = await env.play(AUTO, kill_at=turn, kill_point="during_search")
    assert result.kills == 1 and result.ok, (result.failures, result.error, result.transcript)
    assert not heard(result, AUTO)
    roles = [t["role"] for t in result.transcript]
    assert roles == ["assistant", *["user", "tool", "assistant"] * 3], result.transcript
