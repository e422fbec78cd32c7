"""Supervisors in ``call simulate`` scripts (``supervisor:`` turns with ``takeover: true`` and
``handback: NODE``), played as real calls: the real ``supervise`` update on a real
``CallWorkflow``, the real agent (``FlowAgent``, runner, outbox) in livekit-agents text mode,
the LLM a scripted endpoint. After every supervisor turn the simulator compares the agent's
engine with the workflow's (``SimulationResult.diverged``).

The example script whispers to the bot, takes the call over, and hands it back at another
node; it is played uninterrupted, then with the agent killed in every turn (the kills during
the takeover resume in the takeover: the new agent starts paused and the bot says nothing
until the hand-back), and every run must end as the uninterrupted one."""

from __future__ import annotations

import functools
import re
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from ringflow.devstack import DevStack
from ringflow.simulation.scripts import ScriptError, load_script
from ringflow.simulation.simulator import SimulationResult
from tests.support.killcases import kill_in_every_turn
from tests.support.paths import ROOT
from tests.support.scriptenv import ScriptEnv, script_env

SCRIPTS = ROOT / "examples" / "scripts"
NAME = "appointment_reminder_supervisor.yaml"

pytestmark = pytest.mark.timeout(600)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def env(temporal_server: DevStack) -> AsyncIterator[ScriptEnv]:
    async for e in script_env(temporal_server, SCRIPTS):
        yield e


def takeover_problems(result: SimulationResult) -> list[str]:
    """The bot silent from the takeover to the hand-back, the supervisor's lines kept as theirs,
    and the call's record of both actions; no divergence of the two engines."""
    out = [f"diverged: {d}" for d in result.diverged]
    notes = [
        i
        for i, t in enumerate(result.transcript)
        if t["role"] == "system" and t["text"].startswith("supervisor ")
    ]
    kinds = [result.transcript[i]["text"].split(" by ")[0] for i in notes]
    if kinds != ["supervisor whisper", "supervisor takeover", "supervisor hand-back"]:
        return [*out, f"supervisor notes in the transcript: {kinds}"]
    took, back = notes[1], notes[2]
    during = result.transcript[took:back]
    out += [f"the bot spoke during the takeover: {t['text']!r}" for t in during if t["role"] == "assistant"]
    said = [t["text"] for t in during if t["role"] == "supervisor"]
    if said[:1] != ["Hi Robin, this is Sam from the front desk. Let me take this one."] or len(said) < 2:
        out.append(f"the supervisor's turns: {said}")
    if not any(t["role"] == "user" and "last visit free" in t["text"] for t in during):
        out.append("the caller's words to the supervisor are not in the transcript")
    return out


@pytest.mark.asyncio(loop_scope="session")
async def test_a_whisper_a_takeover_and_a_handback_at_another_node(env: ScriptEnv) -> None:
    result = await env.play(NAME)
    assert result.ok, (result.failures, result.error, result.rejected)
    assert takeover_problems(result) == []
    lane = env.llm.lane(result.call_id)
    chats = [r for r in lane.requests if r.kind == "chat"]
    whispered = [i for i, r in enumerate(chats) if "If Tuesday is hard for them" in str(r.messages)]
    assert whispered, "the whisper reached no LLM request"
    first = chats[whispered[0]]
    assert "supervisor's hint" in str(first.messages)  # as a system note, for the next turn
    handed = [r for r in chats if "[supervisor] It was covered by your plan" in str(r.messages)]
    assert handed, "the bot's context after the hand-back lacks the supervisor's segment"
    assert not any("If Tuesday is hard" in t["text"] for t in result.transcript if t["role"] == "assistant")


@pytest.mark.asyncio(loop_scope="session")
async def test_an_agent_killed_in_any_turn_resumes_as_the_uninterrupted_call(env: ScriptEnv) -> None:
    base = await env.play(NAME)
    assert base.ok, base.failures
    turns = len(load_script(SCRIPTS / NAME)[0].turns)
    failures = await kill_in_every_turn(functools.partial(env.play, NAME), turns, base, takeover_problems)
    assert failures == []


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.parametrize("point", ["supervisor", "turn:supervisor", "turn:user"])
async def test_a_kill_during_the_takeover_resumes_in_the_takeover(env: ScriptEnv, point: str) -> None:
    """Killed while the supervisor has the call (at the takeover's own application, at the
    supervisor's line, at the caller's line to them): the new agent starts paused."""
    base = await env.play(NAME)
    at = {"supervisor": 3, "turn:supervisor": 5, "turn:user": 6}[point]
    killed = await env.play(NAME, kill_at=at, kill_point=point)
    assert killed.kills == 1 and killed.ok, (killed.failures, killed.error)
    assert (killed.path, killed.state, killed.disposition) == (base.path, base.state, base.disposition)
    assert takeover_problems(killed) == []


@pytest.mark.parametrize(
    ("turns", "message"),
    [
        ('[{supervisor: "Back to you.", handback: confirmed}]', "a hand-back without a takeover"),
        ('[{supervisor: "Mine.", takeover: true}, {supervisor: "Mine again.", takeover: true}]', "already"),
        ('[{user: "Hi", takeover: true}]', "go on a 'supervisor' turn"),
        ('[{supervisor: "Mine.", takeover: true}, {user: "Hi", llm: [{say: "Hello"}]}]', "no 'llm' replies"),
        ('[{supervisor: "Mine.", takeover: true}, {silence: 3}]', "speaks ('user') to the supervisor"),
    ],
)
def test_a_script_with_supervisor_turns_out_of_order_is_refused_naming_the_turn(
    tmp_path: object, turns: str, message: str
) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "bad.yaml"
    path.write_text(
        f"flow: {SCRIPTS.parent / 'flows' / 'appointment_reminder' / 'flow.yaml'}\nturns: {turns}\n"
    )
    with pytest.raises(ScriptError, match=re.escape(message)):
        load_script(path)
