"""Two real agents on one call (issue 23 §4): only the call's current agent speaks for it.

Both agents are the production agent code in livekit-agents' text mode (``attach_agent``,
as in ``tests/test_agent_text.py``), each with its own scripted LLM lane, on a real
CallWorkflow. Agent A serves the call; agent B attaches (the workflow took A for lost, or a
dispatch was duplicated) while A still runs; then both talk at once. The call moves only
by B, every turn of B's is in the transcript, and A learns it was replaced and leaves
without hanging up B's caller: at its next action with a lease (the lease the webhook
relay released when LiveKit said A left), at its next update, heartbeat or hang-up without.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from livekit.agents import AgentSession
from livekit.plugins import openai as lk_openai
from redis.asyncio import Redis
from temporalio.client import Client

from ringflow.agents.flow_agent import LiveKitPort
from ringflow.agents.lease import AgentLease
from ringflow.agents.runner import AgentRun
from ringflow.contract.call import CallView
from ringflow.contract.updates import Snapshot
from ringflow.simulation.scripted_llm import LANE_HEADER, Lane, ScriptedLLM
from tests.support.agentkit import TIMEOUT_S, TextCall, call, say, text_call
from tests.support.hostile import task_failures

pytestmark = pytest.mark.timeout(300)
# Their fixtures: the scripted LLM, the worker in this process, the real Redis (or a skip).


@pytest_asyncio.fixture
async def leases(redis: Redis) -> AsyncIterator[AgentLease]:
    """The agents' lease in the real Redis, under a prefix of this test's own."""
    prefix = f"test-race-{uuid.uuid4().hex[:8]}:"
    yield AgentLease(redis, ttl_s=30.0, prefix=prefix)
    keys = await redis.keys(f"{prefix}*")
    if keys:
        await redis.delete(*keys)


def on_lane(tc: TextCall, lane: Lane) -> Any:
    """A session factory for another agent of the call: its own LLM lane, so each agent's
    replies are scripted apart and what each asked the model is seen apart."""

    def make(snap: Snapshot) -> AgentSession:
        model = lk_openai.LLM(
            model="scripted",
            base_url=tc.llm.base_url,
            api_key="scripted",
            extra_headers={LANE_HEADER: lane.name},
        )
        return AgentSession(llm=model, user_away_timeout=None)

    return make


async def speak(run: AgentRun, key: str, text: str) -> None:
    """One caller turn to one agent, played until its session is idle (or, for an agent
    that stopped on it, until it has left: its session is closed under the turn)."""
    run.controller.begin_turn(key)
    turn: asyncio.Future[Any] = asyncio.ensure_future(run.session.run(user_input=text))
    gone: asyncio.Future[Any] = asyncio.ensure_future(run.left.wait())
    await asyncio.wait({turn, gone}, timeout=TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
    if run.left.is_set():
        turn.cancel()
        with contextlib.suppress(BaseException):
            await turn
        return
    gone.cancel()
    await turn
    await asyncio.wait_for(run.session.wait_for_idle(), TIMEOUT_S)


async def left(run: AgentRun) -> str:
    await asyncio.wait_for(run.left.wait(), TIMEOUT_S)
    assert run.controller.dead
    return run.left_why or ""


def reasons(st: CallView) -> str:
    return "\n".join(r.reason for r in st.rejected)


async def second_agent(tc: TextCall, **options: Any) -> tuple[AgentRun, Lane]:
    lane = tc.llm.lane(f"{tc.call.call_id}-b")
    run = await tc.attach(session_factory=on_lane(tc, lane), **options)
    return run, lane


B_TURNS = [
    ("Hi, I'm calling about dinner.", [say("Happy to help. What would you like?")]),
    ("A table for two, please.", [call("to_booking"), say("Sure, for what time?")]),
    ("Seven tonight.", [say("Seven tonight it is.")]),
]


async def b_talks(b: AgentRun) -> None:
    for i, (text, _) in enumerate(B_TURNS):
        await speak(b, f"b{i}", text)


def b_transcript() -> list[str]:
    out = []
    for text, steps in B_TURNS:
        out += [text, *(s["say"] for s in steps if "say" in s)]
    return out


async def test_without_leases_two_racing_agents_never_both_move_the_call(
    tc_no_lease: TextCall,
) -> None:
    """A (replaced, no lease) and B talk at once: A moves its own copy of the call to
    ``fresh`` and then to its end, B moves the call to ``booking``. The workflow follows B
    alone, keeps all three of B's turns, refuses each of A's events, and A, learning of B
    before it hangs up, leaves without closing B's room."""
    tc = tc_no_lease
    a = tc.run
    closed: list[str] = []
    b, lane_b = await second_agent(tc)
    assert (a.snapshot.epoch, b.snapshot.epoch) == (1, 2)
    tc.lane.queue_reply([call("to_fresh"), say("New topic, go ahead.")])
    tc.lane.queue_reply([call("wrap_up")])
    tc.lane.queue_reply([say("Thanks for calling, goodbye.")])  # the goodbye node's own turn
    for _, steps in B_TURNS:
        lane_b.queue_reply(steps)

    async def a_talks() -> None:
        await speak(a, "a0", "Something else entirely.")
        await speak(a, "a1", "That's all, bye.")

    async def close_room() -> None:
        closed.append("closed")

    port = a.controller.port
    assert isinstance(port, LiveKitPort)
    port.close = close_room  # as in a LiveKit room: A's hang-up would close B's room
    await asyncio.gather(a_talks(), b_talks(b))
    why = await left(a)
    assert "epoch 2" in why
    assert a.controller.node == "goodbye"  # A's own engine went its way...
    assert not closed  # ...but it did not hang up B's caller

    st = await tc.synced()
    assert st.node == "booking" and st.path == ["welcome", "booking"] and st.transitions == 1
    assert st.status == "live" and st.agent_id == b.controller.agent_id and st.epoch == 2
    transcript = [t.text for t in await tc.call.transcript()]
    assert transcript[1:] == b_transcript()  # after A's greeting: B's turns, all, in order
    refused = reasons(st)
    assert "a transition event from agent epoch 1 refused: the call's agent is epoch 2" in refused
    assert "a turns event from agent epoch 1 refused" in refused
    assert "already applied" not in refused
    assert await task_failures(tc.call) == []


async def test_a_replaced_agent_without_a_lease_leaves_at_its_next_heartbeat(
    temporal_client: Client, task_queue: str, scripted_llm: ScriptedLLM, worker: None
) -> None:
    """Doing nothing, A still learns of B: each heartbeat asks the workflow for the current
    epoch (a query: nothing in the history)."""
    async with text_call(temporal_client, task_queue, scripted_llm, agent={"heartbeat_s": 0.1}) as tc:
        a = tc.run
        b, _ = await second_agent(tc, heartbeat_s=0.1)
        assert "the call's agent is epoch 2 now, not 1" in await left(a)
        assert not b.controller.dead and not b.left.is_set()


async def test_an_update_refused_for_its_epoch_stops_the_agent(tc_no_lease: TextCall) -> None:
    """A node function is an update: refused for A's epoch, A stops and the LLM is told
    nothing to answer; the handler never ran."""
    tc = tc_no_lease
    a = tc.run
    await second_agent(tc)
    tc.lane.queue_reply([call("opening_hours", day="Monday"), say("We're open 9 to 5.")])
    await speak(a, "a0", "When are you open on Monday?")
    assert "update 'call_function' from agent epoch 1 refused" in await left(a)
    st = await tc.call.state()
    assert st.state == {}  # opening_hours would have kept the day asked
    assert "update 'call_function' from agent epoch 1 refused" in reasons(st)


async def test_with_leases_the_replaced_agent_stops_before_it_acts_on_the_room(
    temporal_client: Client, task_queue: str, scripted_llm: ScriptedLLM, worker: None, leases: AgentLease
) -> None:
    """LiveKit said A left, so the webhook relay released A's lease (``WebhookRelay``), and
    B took it and attached. A was still running: at the caller's next words it checks its
    lease before answering, finds it gone, and stops; the model is never asked for A."""
    opts = {"lease": leases, "lease_fresh_s": 0.0}
    async with text_call(temporal_client, task_queue, scripted_llm, agent=opts) as tc:
        a = tc.run
        assert await leases.holder(tc.call.call_id) == a.controller.agent_id
        assert await leases.release(tc.call.call_id, a.controller.agent_id)  # as the relay does
        b, lane_b = await second_agent(tc, **opts)
        assert await leases.holder(tc.call.call_id) == b.controller.agent_id
        tc.lane.queue_reply([call("to_quiet"), say("Please listen to our terms.")])
        for _, steps in B_TURNS:
            lane_b.queue_reply(steps)
        await asyncio.gather(speak(a, "a0", "Read me the terms."), b_talks(b))
        assert "lease" in await left(a)
        assert tc.lane.of_kind("chat") == []  # A never answered: the lease was checked first
        st = await tc.synced()
        assert st.path == ["welcome", "booking"] and st.agent_id == b.controller.agent_id
        assert [t.text for t in await tc.call.transcript()][1:] == b_transcript()
        assert not b.controller.dead
        assert await task_failures(tc.call) == []


async def test_an_agent_without_a_lease_says_so_at_start(
    temporal_client: Client,
    task_queue: str,
    scripted_llm: ScriptedLLM,
    worker: None,
    leases: AgentLease,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="agents.runner")
    async with text_call(temporal_client, task_queue, scripted_llm) as tc:
        warned = [r for r in caplog.records if "without a lease" in r.getMessage()]
        assert len(warned) == 1 and warned[0].levelno == logging.WARNING
        assert tc.call.call_id in warned[0].getMessage() and "RINGFLOW_REDIS_URL" in warned[0].getMessage()
        caplog.clear()
        await tc.attach(lease=leases)  # the first agent's lease is not held in Redis: the second takes it
        assert not [r for r in caplog.records if "without a lease" in r.getMessage()]


@pytest_asyncio.fixture
async def tc_no_lease(
    temporal_client: Client, task_queue: str, scripted_llm: ScriptedLLM, worker: None
) -> AsyncIterator[TextCall]:
    """A desk call served by agent A, with no lease and no heartbeat: what tells A of its
    successor is what it does itself (an update, its hang-up)."""
    async with text_call(temporal_client, task_queue, scripted_llm) as tc:
        yield tc
