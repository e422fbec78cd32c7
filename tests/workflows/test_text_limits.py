"""Free-text fields that are not conversation (agent ids, names, rooms, numbers) are bounded:
an over-long one is refused, and the call goes on. A real CallWorkflow on the dev server."""

from __future__ import annotations

import uuid

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError

from ringflow.callflow.errors import FlowError
from ringflow.contract.call import CallInput
from ringflow.contract.events import Heartbeat
from ringflow.contract.updates import CallFunctionRequest
from ringflow.contract.wire import MAX_ID_CHARS
from ringflow.workflows.call import CallWorkflow
from tests.support.wfkit import Agent, clinic, req, running_worker, start, wait_state

LONG = "x" * 10_000


async def test_an_over_long_agent_id_is_not_adopted(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue)
        await call.heartbeat("agent-1")
        await wait_state(call, lambda s: s.agent_id == "agent-1", what="agent adopted")
        # raw, as a hostile or broken sender would send it (the client's own model refuses it)
        await call.handle.signal("heartbeat", {"type": "heartbeat", "agent_id": LONG})
        await Agent(call).transition("verify", "confirmed")
        st = await wait_state(call, lambda s: s.node == "offer", what="call goes on")
        assert st.agent_id == "agent-1"
        assert LONG not in st.model_dump_json()
        # a function call whose names are over the limit is refused; the call still answers
        with pytest.raises(WorkflowUpdateFailedError):
            await call.handle.execute_update(
                "call_function", {"event_id": "fn-long", "node": "offer", "name": LONG, "args": {}}
            )
        assert not (await call.call_function(req("offer", "list_slots"))).error
        await call.hangup()
        record = await call.handle.result()
    assert record.end_reason == "user_hangup"


def test_the_models_bound_names_and_ids() -> None:
    with pytest.raises(ValueError):
        CallFunctionRequest(event_id="e", node="offer", name="n" * 129)
    with pytest.raises(ValueError):
        Heartbeat(agent_id="a" * (MAX_ID_CHARS + 1))
    assert Heartbeat(agent_id="a" * MAX_ID_CHARS).agent_id


async def test_the_client_refuses_over_long_call_fields(temporal_client: Client, task_queue: str) -> None:
    with pytest.raises(FlowError, match="campaign_id has 1000 characters; the limit is 256"):
        await start(temporal_client, task_queue, campaign_id="c" * 1000)
    with pytest.raises(FlowError, match="variable 'patient' has 20000 characters"):
        await start(temporal_client, task_queue, variables={"patient": "p" * 20_000})
    with pytest.raises(
        FlowError, match=r"variable patient contains a NUL character \(U\+0000\) at position 1"
    ):
        await start(temporal_client, task_queue, variables={"patient": "p\x00"})


async def test_the_workflow_refuses_over_long_call_fields_itself(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url):
        handle = await temporal_client.start_workflow(
            CallWorkflow.run,
            CallInput(
                call_id="longroom", definition=clinic(), room="r" * 1000, variables={"patient": "Alex"}
            ),
            id=f"call-longroom-{uuid.uuid4().hex[:6]}",
            task_queue=task_queue,
        )
        with pytest.raises(WorkflowFailureError) as err:
            await handle.result()
    assert "room has 1000 characters; the limit is 256" in str(err.value.cause)
