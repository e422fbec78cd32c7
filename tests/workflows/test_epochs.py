"""Only the call's current agent speaks for it (issue 23 §4), against a real CallWorkflow:
each attach gets an epoch, and what a replaced agent sends (events, heartbeats, updates)
is refused and recorded, never applied and never a failed workflow task; a seq no agent
could have sent is refused, not skipped to; the epoch survives continue-as-new.

The agents here are driven by hand (signals and updates as the agent sends them), so each
refusal is seen on its own; ``tests/test_agent_race.py`` races two real agents."""

from __future__ import annotations

import asyncio
import time

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError, WorkflowUpdateStage

from ringflow.agents.controller import superseded as agent_superseded
from ringflow.agents.values import WAIT_S, Values
from ringflow.contract.call import CallView
from ringflow.contract.events import EventBatch, Heartbeat, Turn, TurnsEvent
from ringflow.contract.updates import CallFunctionResult, ValuesAnswer
from ringflow.simulation.scripted_llm import ScriptedLLM
from ringflow.workflows.client import CallHandle
from ringflow.workflows.inbox import MAX_AHEAD
from tests.support.hostile import task_failures
from tests.support.wfkit import Agent, req, running_worker, start, wait_state


def reasons(state: CallView) -> str:
    return "\n".join(r.reason for r in state.rejected)


def superseded(exc: pytest.ExceptionInfo[WorkflowUpdateFailedError]) -> bool:
    return getattr(exc.value.cause, "type", None) == "AgentSuperseded"


@pytest.fixture
def extractor_llm(llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch) -> ScriptedLLM:
    """The test's own scripted endpoint, as the worker's extraction LLM."""
    monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("RINGFLOW_LLM_MODEL", "scripted-extractor")
    return llm


async def test_a_replaced_agent_moves_nothing_and_the_current_agents_turns_all_land(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """The probe of the issue: after B attached, A's heartbeat made A the call's agent
    again, A's transition moved the call, and B's three turns were refused as already
    applied (A had taken their seqs). Now each of A's is refused and recorded."""
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue)
        snap_a = await call.attach("agent-a")
        assert snap_a.epoch == 1
        a = Agent(call, epoch=snap_a.epoch, seq=snap_a.next_seq - 1)
        await a.say(("user", "hello, is this the clinic?"))
        await wait_state(call, lambda s: s.turns == 1, what="A's turn")

        snap_b = await call.attach("agent-b")
        assert snap_b.epoch == 2 and snap_b.next_seq == 2
        b = Agent(call, epoch=snap_b.epoch, seq=snap_b.next_seq - 1)

        await call.handle.signal("heartbeat", Heartbeat(agent_id="agent-a", epoch=snap_a.epoch))
        await a.transition("verify", "wrong_person")  # seq 2: the seq B is about to use
        with pytest.raises(WorkflowUpdateFailedError) as refused_fn:
            await call.call_function(req("verify", "wants_human").model_copy(update={"epoch": snap_a.epoch}))
        with pytest.raises(WorkflowUpdateFailedError) as refused_settle:
            await call.settle("agent-a", after_seq=0, epoch=snap_a.epoch)

        for text in ("yes, that's me", "I'd like a check-up", "next Tuesday if you can"):
            await b.say(("user", text))
        st = await wait_state(call, lambda s: s.turns == 4, what="B's three turns")

        assert superseded(refused_fn) and superseded(refused_settle)
        assert st.agent_id == "agent-b" and st.epoch == 2
        assert st.node == "verify" and st.path == ["verify"]  # A's wrong_person moved nothing
        assert st.next_seq == 5 and st.waiting_for_seq is None
        transcript = [t.text for t in await call.transcript()]
        assert transcript == [
            "hello, is this the clinic?",
            "yes, that's me",
            "I'd like a check-up",
            "next Tuesday if you can",
        ]
        why = reasons(st)
        assert "a heartbeat event from agent epoch 1 refused: the call's agent is epoch 2" in why
        assert "a transition event from agent epoch 1 refused" in why
        assert "update 'call_function' from agent epoch 1 refused" in why
        assert "update 'settle' from agent epoch 1 refused" in why
        assert "already applied" not in why

        await b.transition("verify", "confirmed")  # the current agent still moves the call
        st = await wait_state(call, lambda s: s.node == "offer", what="B's transition")
        assert st.path == ["verify", "offer"]
        assert await task_failures(call) == []


async def test_epochs_never_issued_and_heartbeats_of_other_agents_are_refused(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """A made-up epoch is no agent's; a heartbeat naming no epoch names the call's agent
    only if it is that agent (it once re-crowned a replaced one)."""
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue)
        snap = await call.attach("agent-a")
        ghost = Agent(call, epoch=7, seq=snap.next_seq - 1)
        await ghost.transition("verify", "wrong_person")
        await call.heartbeat("agent-z")  # no epoch, not the call's agent
        await call.handle.signal("events", {"events": [{"type": "turns", "seq": 1, "epoch": 1}]})
        st = await wait_state(call, lambda s: len(s.rejected) >= 3, what="three refusals")
        why = reasons(st)
        assert "a transition event names agent epoch 7, never issued (the call is at 1): refused" in why
        assert "a heartbeat of agent agent-z refused: the call's agent is epoch 1" in why
        assert "malformed event 0" in why  # the current epoch's malformed event keeps its seq
        assert st.agent_id == "agent-a" and st.node == "verify" and st.next_seq == 2
        assert await task_failures(call) == []


async def test_a_seq_no_agent_could_have_sent_is_refused_not_skipped_to(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """One event with seq 10**9 was held, the gap skip jumped ``next_seq`` to 1,000,000,001,
    and every later event of the real agent was refused: the call froze on its node."""
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue, gap_wait_s=1.0)
        snap = await call.attach("agent-a")
        agent = Agent(call, epoch=snap.epoch, seq=snap.next_seq - 1)
        far = TurnsEvent(event_id="far", seq=10**9, at=time.time(), items=[Turn(role="user", text="x")])
        await call.batch(EventBatch(events=[far]))
        st = await wait_state(call, lambda s: len(s.rejected) >= 1, what="the far seq refused")
        assert st.waiting_for_seq is None and st.next_seq == 1  # nothing held: no gap to skip
        assert f"seq 1000000000 is more than {MAX_AHEAD} past the next (1)" in reasons(st)

        await agent.say(("user", "yes that's me"))
        await agent.transition("verify", "confirmed")
        await agent.say(("user", "a check-up please"))
        st = await wait_state(call, lambda s: s.next_seq == 4, what="the real agent's events")
        assert st.node == "offer" and st.turns == 2

        agent.seq += 1  # seq 4 lost on the way
        near = agent.turns_event(("user", "held for seq 4"))
        agent.seq = 4 + MAX_AHEAD - 1  # the farthest past the next (4) an agent could be
        edge = agent.turns_event(("user", "held as well"))
        await call.batch(EventBatch(events=[near, edge]))
        st = await wait_state(call, lambda s: s.waiting_for_seq == 4, what="both held for seq 4")
        assert sum("past the next" in r.reason for r in st.rejected) == 1  # the far one only
        assert st.node == "offer"
        assert await task_failures(call) == []


async def test_the_epoch_survives_continue_as_new(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """The epoch is part of what a run hands the next: after continue-as-new the replaced
    agent is still refused and the current one still speaks, and the next attach counts on."""
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue, max_history_events=50)
        old = await call.attach("agent-a")
        snap = await call.attach("agent-b")
        b = Agent(call, epoch=snap.epoch, seq=snap.next_seq - 1)
        for i in range(40):
            await b.say(("user", f"turn {i}"))
        st = await wait_state(call, lambda s: s.runs >= 2 and s.turns == 40, timeout=60, what="a new run")
        assert st.epoch == 2 and st.agent_id == "agent-b"

        a = Agent(call, epoch=old.epoch, seq=b.seq)
        await a.transition("verify", "wrong_person")
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await call.call_function(req("verify", "wants_human").model_copy(update={"epoch": old.epoch}))
        assert superseded(refused)
        await b.transition("verify", "confirmed")
        st = await wait_state(call, lambda s: s.node == "offer", what="B's transition")
        assert st.path == ["verify", "offer"]
        assert "a transition event from agent epoch 1 refused: the call's agent is epoch 2" in reasons(st)
        assert (await call.attach("agent-c")).epoch == 3
        assert await task_failures(call) == []


async def test_an_update_whose_agent_is_replaced_while_it_waits_is_refused_not_run(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """A's node function waits for A's events before it (``after_seq``); B attaches and its
    events fill those seqs. The function must not then run on B's call."""
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue)
        a = await call.attach("agent-a")
        wants = req("verify", "wants_human").model_copy(update={"epoch": a.epoch, "after_seq": 2})
        waiting = await call.handle.start_update(
            "call_function",
            wants,
            wait_for_stage=WorkflowUpdateStage.ACCEPTED,
            result_type=CallFunctionResult,
        )
        snap = await call.attach("agent-b")
        b = Agent(call, epoch=snap.epoch, seq=snap.next_seq - 1)
        await b.say(("user", "yes that's me"))
        await b.say(("user", "and I'd like a check-up"))
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await waiting.result()
        assert superseded(refused)
        st = await wait_state(call, lambda s: s.turns == 2, what="B's turns")
        assert st.node == "verify" and st.path == ["verify"]  # wants_human never ran
        assert "update 'call_function' from agent epoch 1 refused" in reasons(st)
        assert await task_failures(call) == []


async def test_a_replaced_agents_values_request_is_refused_and_the_current_agents_answered(
    extractor_llm: ScriptedLLM, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """``values`` was the one update without the agent's epoch: a replaced agent still got
    the extraction's result (and went on acting on it). Now it is refused like the others
    (``AgentSuperseded``, recorded), and the current agent's is answered."""
    extractor_llm.lane().set_extract("verify", {"confirmed_identity": True})
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue)
        snap_a = await call.attach("agent-a")
        a = Agent(call, epoch=snap_a.epoch, seq=snap_a.next_seq - 1)
        await a.say(("assistant", "Hello, is this Alex Doe?"), ("user", "Yes, speaking."))
        await a.transition("verify", "confirmed")  # leaving verify starts its extraction
        await wait_state(call, lambda s: s.node == "offer", what="A's transition")

        snap_b = await call.attach("agent-b")
        assert snap_b.state.extracting  # B takes up the running extraction
        b = Agent(call, epoch=snap_b.epoch, seq=snap_b.next_seq - 1)
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await a.collect("verify#1")
        assert superseded(refused)

        answer = await b.collect("verify#1")
        assert answer.values == {"confirmed_identity": True} and answer.error is None
        st = await wait_state(call, lambda s: s.extracted == answer.values, what="B applied the values")
        assert "update 'values' from agent epoch 1 refused: the call's agent is epoch 2" in reasons(st)
        assert st.agent_id == "agent-b" and st.epoch == 2
        assert await task_failures(call) == []


class ReplacedAgent:
    """What collecting values (``agents/values.Values``) uses of the controller, for an
    agent of an older epoch: the controller's own reading of a refusal, which stops it."""

    class Outbox:
        def kick(self) -> None:
            pass

    def __init__(self, call: CallHandle, epoch: int, seq: int) -> None:
        self.call, self.epoch, self.seq = call, epoch, seq
        self.dead = False
        self.outbox = self.Outbox()
        self.applied: list[ValuesAnswer] = []

    def refused(self, exc: BaseException) -> bool:
        if agent_superseded(exc):
            self.dead = True
            return True
        return False

    async def apply_extraction(self, answer: ValuesAnswer) -> None:
        self.applied.append(answer)


async def test_a_replaced_agent_collecting_values_stops_on_the_refusal(
    extractor_llm: ScriptedLLM, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """The agent's side: its ``values`` request names its epoch, and the refusal stops it
    at once (no retrying until ``WAIT_S``, no fallback applied to its engine)."""
    extractor_llm.lane().set_extract("verify", {"confirmed_identity": True})
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue)
        snap_a = await call.attach("agent-a")
        a = Agent(call, epoch=snap_a.epoch, seq=snap_a.next_seq - 1)
        await a.say(("assistant", "Hello, is this Alex Doe?"), ("user", "Yes, speaking."))
        await a.transition("verify", "confirmed")
        await call.attach("agent-b")
        ctrl = ReplacedAgent(call, snap_a.epoch, a.seq)
        await asyncio.wait_for(Values(ctrl).collect("verify#1", ctrl.seq), timeout=WAIT_S / 3)  # type: ignore[arg-type]
        assert ctrl.dead and ctrl.applied == []
        assert "update 'values' from agent epoch 1 refused" in reasons(await call.state())
        assert await task_failures(call) == []


async def test_a_function_its_first_agent_left_unanswered_is_run_for_the_next_agent(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """A's update waits for A's events; B attaches and sends the same call (a turn replayed
    after a kill has the same event id) while A's still waits; A's is then refused as
    superseded, with no result. B's waited for a result that would never come (the call's
    agent hung on it); now it runs the function itself, once."""
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue)
        snap_a = await call.attach("agent-a")
        first = req("verify", "wants_human").model_copy(update={"epoch": snap_a.epoch, "after_seq": 1})
        a_update = await call.handle.start_update(
            "call_function",
            first,
            wait_for_stage=WorkflowUpdateStage.ACCEPTED,
            result_type=CallFunctionResult,
        )
        snap_b = await call.attach("agent-b")
        b = Agent(call, epoch=snap_b.epoch, seq=snap_b.next_seq - 1)
        again = first.model_copy(update={"epoch": snap_b.epoch, "after_seq": 1})
        b_update = await call.handle.start_update(
            "call_function",
            again,
            wait_for_stage=WorkflowUpdateStage.ACCEPTED,
            result_type=CallFunctionResult,
        )
        await b.say(("user", "I'd like to talk to a person"))  # seq 1: both updates may go on
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await asyncio.wait_for(a_update.result(), 30)
        assert superseded(refused)
        out = await asyncio.wait_for(b_update.result(), 30)
        assert not out.error, out
        assert await task_failures(call) == []
