"""CallWorkflow against a real Temporal dev server, driven as the agent drives it."""

from __future__ import annotations

import uuid

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError

from ringflow.activities.persistence import load_call
from ringflow.callflow.errors import FlowError
from ringflow.contract.events import Turn, TurnsEvent
from ringflow.contract.wire import MAX_ARGS_BYTES
from tests.support.wfkit import Agent, req, running_worker, start, wait_state


async def test_happy_path_transition_and_branch_table(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue)
        agent = Agent(call)
        await agent.say(("assistant", "Hello, is this Alex Doe?"), ("user", "Yes, speaking."))
        await agent.transition("verify", "confirmed")
        st = await wait_state(call, lambda s: s.node == "offer", what="node offer")
        assert st.status == "live" and st.path == ["verify", "offer"]
        slots = await call.call_function(req("offer", "list_slots"))
        assert slots.result == {"slots": ["Mon 9"]} and slots.decision == "stay"
        taken = await call.call_function(req("offer", "book", slot="Tue 10"))
        assert taken.decision == "transition" and taken.node == "offer"
        booked = await call.call_function(req("offer", "book", slot="Mon 9"))
        assert booked.decision == "end" and booked.node == "booked"
        record = await call.handle.result()
    assert record.path == ["verify", "offer", "offer", "booked"]
    assert record.disposition == "booked" and record.end_reason == "completed"
    assert record.state == {"booking": "Mon 9"}
    stored = load_call(call.call_id, database_url=sqlite_url)
    assert stored is not None and stored.disposition == "booked" and stored.path == record.path


async def test_unknown_function_and_bad_args_come_back_as_llm_errors(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue)
        agent = Agent(call)
        await agent.transition("verify", "confirmed")
        await wait_state(call, lambda s: s.node == "offer")
        unknown = await call.call_function(req("offer", "book_everything"))
        assert unknown.error and "list_slots" in unknown.result["valid_functions"]
        bad = await call.call_function(req("offer", "book", slot=42))
        assert bad.error and "slot" in bad.result["error"]
        broken = await call.call_function(req("offer", "broken"))
        assert broken.error and "booking system is down" in broken.result["error"]
        st = await call.state()
        assert st.node == "offer" and st.status == "live"
        await call.hangup()
        record = await call.handle.result()
    assert record.end_reason == "user_hangup"


async def test_oversized_function_arguments_are_refused_by_the_validator(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """Arguments too large to keep in the history are refused before the update is accepted:
    nothing runs, the error names the function and the limit, and the call goes on."""
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue)
        agent = Agent(call)
        await agent.transition("verify", "confirmed")
        await wait_state(call, lambda s: s.node == "offer")
        with pytest.raises(WorkflowUpdateFailedError) as err:
            await call.call_function(req("offer", "book", slot="x" * (MAX_ARGS_BYTES + 1)))
        assert f"'book' are larger than {MAX_ARGS_BYTES} bytes" in str(err.value.cause)
        st = await call.state()
        assert st.node == "offer" and st.status == "live" and st.state == {}
        await call.hangup()
        await call.handle.result()


async def test_transition_for_unknown_function_is_recorded_and_ignored(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue)
        agent = Agent(call)
        await agent.transition("verify", "teleport")
        await agent.transition("offer", "confirmed")  # wrong from-node
        await agent.transition("verify", "confirmed")
        st = await wait_state(call, lambda s: s.node == "offer")
        reasons = [r.reason for r in st.rejected]
        assert any("teleport" in r for r in reasons) and any("'offer'" in r for r in reasons)
        assert st.path == ["verify", "offer"]
        await call.hangup()
        await call.handle.result()


async def test_duplicates_applied_once_and_out_of_order_reordered(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue)
        agent = Agent(call)
        first = agent.turns_event(("user", "yes it's me"))
        second = agent.transition_event("verify", "confirmed")
        third = agent.transition_event("offer", "wants_human")
        await call.transition(third)  # arrives first: held until 1 and 2 are in
        st = await wait_state(call, lambda s: s.waiting_for_seq == 1)
        assert st.node == "verify"
        await call.transition(second)
        await call.transition(second)  # duplicate
        await call.turns(first)
        await call.turns(first)  # duplicate
        record = await call.handle.result()
        st = await call.state()
    assert record.path == ["verify", "offer", "handoff"]
    assert st.duplicates == 2 and st.turns == 1
    assert record.disposition == "callback"


async def test_oversized_turn_rejected_call_alive(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue)
        agent = Agent(call)
        huge = TurnsEvent(event_id="big-1", seq=1, items=[Turn(role="user", text="x" * 1_000_000)])
        with pytest.raises(ValueError, match="limit"):
            await call.turns(huge)  # the client refuses before sending
        agent.seq = 1  # the big batch takes seq 1
        await call.handle.signal("turns", huge)  # a raw sender bypassing the client
        st = await wait_state(call, lambda s: bool(s.rejected))
        assert "characters; the limit" in st.rejected[0].reason
        await agent.transition("verify", "confirmed")  # seq 2: the big one consumed seq 1
        st = await wait_state(call, lambda s: s.node == "offer")
        assert st.turns == 0
        await call.hangup()
        await call.handle.result()


async def test_missing_required_variable_is_a_clear_error(temporal_client: Client, task_queue: str) -> None:
    with pytest.raises(FlowError, match="patient"):
        await start(temporal_client, task_queue, variables={})


async def test_workflow_refuses_bad_input_without_a_client_check(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    from ringflow.contract.call import CallInput
    from ringflow.workflows.call import CallWorkflow
    from tests.support.wfkit import clinic

    async with running_worker(temporal_client, task_queue, sqlite_url):
        handle = await temporal_client.start_workflow(
            CallWorkflow.run,
            CallInput(call_id="novars", definition=clinic()),
            id=f"call-novars-{uuid.uuid4().hex[:6]}",
            task_queue=task_queue,
        )
        with pytest.raises(WorkflowFailureError) as err:
            await handle.result()
    assert "patient" in str(err.value.cause)


async def test_overlapping_handlers_keep_each_others_state(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    import asyncio

    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue)
        await Agent(call).transition("verify", "confirmed")
        await wait_state(call, lambda s: s.node == "offer")
        slow = call.call_function(req("offer", "remember", key="slow", delay_s=0.5))
        fast = call.call_function(req("offer", "remember", key="fast"))
        await asyncio.gather(slow, fast)
        st = await call.state()
        assert st.state == {"slow": True, "fast": True}
        await call.hangup()
        await call.handle.result()
