"""A client without Ringflow's codec cannot get a call or a campaign run in clear.

A plain Temporal client (pydantic converter, no codec: what any SDK user or
`temporal workflow start` is) starts a call and a campaign against a worker connected as
`ringflow worker` connects (``refuse_plaintext_inputs``): each fails at once, with a
non-retryable ``PlaintextInput`` error naming the reason, and no workflow task fails (a
failing task would be retried forever). The same call from Ringflow's own client runs, and
a worker that allows plaintext inputs (a migration) runs the plain one too.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError

from ringflow.activities import campaign_store as store
from ringflow.devstack import DevStack
from ringflow.input_guard import PLAINTEXT_INPUT
from ringflow.temporal_setup import connect
from ringflow.workflows.client import CallHandle
from tests.support.campaignkit import campaign_input, campaign_line, contacts, new_id, run_campaign
from tests.support.wfkit import running_worker, wait_state
from tests.support.wfkit import start as start_call

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def plain_client(server: DevStack) -> Client:
    return await Client.connect(
        server.address, namespace=server.namespace, data_converter=pydantic_data_converter
    )


async def assert_refused(ours: Client, workflow_id: str) -> None:
    """Read back through Ringflow's client: the worker encodes failure messages too."""
    handle = ours.get_workflow_handle(workflow_id)
    with pytest.raises(WorkflowFailureError) as err:
        await asyncio.wait_for(handle.result(), 60)  # without the guard the call runs on
    cause = err.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == PLAINTEXT_INPUT and cause.non_retryable
    assert "unencrypted" in cause.message and "RINGFLOW_ALLOW_PLAINTEXT_INPUTS" in cause.message
    events = [e.event_type async for e in handle.fetch_history_events()]
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in events
    assert events[-1] == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED


async def test_a_plain_clients_call_and_campaign_fail_on_an_encrypting_worker(
    temporal_server: DevStack, task_queue: str, sqlite_url: str
) -> None:
    worker_client = await connect(
        temporal_server.address, temporal_server.namespace, refuse_plaintext_inputs=True
    )
    plain = await plain_client(temporal_server)
    ours = await connect(temporal_server.address, temporal_server.namespace)
    async with running_worker(worker_client, task_queue, sqlite_url):
        call = await start_call(plain, task_queue)
        await assert_refused(ours, call.handle.id)

        people = contacts("+12125550177")
        inp = campaign_input(f"plain{uuid.uuid4().hex[:6]}", "ST_plain")
        campaign = await run_campaign(plain, task_queue, sqlite_url, inp, people)
        await assert_refused(ours, campaign.id)

        encrypted = await start_call(ours, task_queue)  # Ringflow's client: the call runs
        await wait_state(encrypted, lambda s: s.status == "dialing")
        await encrypted.hangup("user_hangup")


async def test_a_worker_allowing_plaintext_runs_a_plain_clients_call(
    temporal_server: DevStack, task_queue: str, sqlite_url: str
) -> None:
    """RINGFLOW_ALLOW_PLAINTEXT_INPUTS=1: the worker connects without the guard."""
    worker_client = await connect(temporal_server.address, temporal_server.namespace)
    plain = await plain_client(temporal_server)
    async with running_worker(worker_client, task_queue, sqlite_url):
        started = await start_call(plain, task_queue)
        call = CallHandle(worker_client, started.call_id)  # the worker's answers are encrypted
        await wait_state(call, lambda s: s.status == "dialing")
        await call.hangup("user_hangup")


async def test_an_encrypting_worker_runs_an_encrypted_campaign_and_its_calls(
    monkeypatch: pytest.MonkeyPatch, temporal_server: DevStack, task_queue: str, sqlite_url: str
) -> None:
    """No false refusal: the campaign's child calls (their input encrypted by the worker
    itself) run on the guarded worker like the campaign does."""
    worker_client = await connect(
        temporal_server.address, temporal_server.namespace, refuse_plaintext_inputs=True
    )
    cid = new_id("enc")
    async with campaign_line(monkeypatch, worker_client, task_queue, sqlite_url) as lk:
        inp = campaign_input(cid, "ST_enc")
        handle = await run_campaign(worker_client, task_queue, sqlite_url, inp, contacts("+12125550178"))
        result = await asyncio.wait_for(handle.result(), 60)
    assert result["status"] == "finished" and len(lk.dials) == 1
    assert store.counts(sqlite_url, cid)["contacts"] == {"reached": 1}
