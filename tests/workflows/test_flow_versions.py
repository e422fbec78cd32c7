"""Calls that name a published flow version instead of carrying its definition.

The definition stays out of the call's history (the input, each attach's snapshot, a
continue-as-new input) and the worker reads it back from the database; the call keeps the
version it started with across a promotion and continue-as-new; a worker whose handler
code is not the published code refuses the call at its start, saying why.
"""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import History
from temporalio.client import Client, WorkflowFailureError

from ringflow.activities import campaign_store as store
from ringflow.activities import flow_store
from ringflow.activities.campaign_rules import RetryRule
from ringflow.callflow.model import FlowDefinition
from ringflow.codec import EncryptionCodec
from ringflow.contract.call import CallInput
from ringflow.flow_codec import REF_KEY, FlowRefCodec, FlowVersionMissing
from tests.support.campaignkit import (
    REDIS,
    campaign_input,
    contacts,
    fake_line,
    new_id,
    run_campaign,
    stand_in_agent,
)
from tests.support.wfkit import FIXTURES, Agent, clinic, req, running_worker, start, wait_state, wait_until


def published(db: str, definition: FlowDefinition | None = None) -> tuple[FlowDefinition, Any]:
    d = definition or clinic()
    return d, flow_store.publish(db, d, flow_store.handler_hashes(d, FIXTURES))


def retasked(text: str) -> FlowDefinition:
    """The clinic flow with another prompt on its first node: a new version."""
    d = clinic()
    nodes = dict(d.flow.nodes)
    nodes["verify"] = nodes["verify"].model_copy(update={"task": text})
    return d.model_copy(update={"flow": d.flow.model_copy(update={"nodes": nodes})})


async def history_bytes(call: Any) -> int:
    history = await call.handle.fetch_history()
    return History(events=history.events).ByteSize()


async def happy_path(call: Any, check: Any = None) -> Any:
    """Attached as an agent, the call goes verify -> offer -> booked."""
    snap = await call.attach("agent-a")
    if check is not None:
        check(snap)
    agent = Agent(call, epoch=snap.epoch, seq=snap.next_seq - 1)
    await agent.say(("assistant", "Hello, is this Alex Doe?"), ("user", "Yes, speaking."))
    await agent.transition("verify", "confirmed")
    await wait_state(call, lambda s: s.node == "offer", what="node offer")
    booked = await call.call_function(
        req("offer", "book", slot="Mon 9").model_copy(update={"epoch": snap.epoch})
    )
    assert booked.decision == "end"
    return await call.handle.result()


async def test_a_call_by_reference_keeps_the_definition_out_of_its_history(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    definition, v = published(sqlite_url)
    flow_store.forget_contents()  # the worker reads the version from the database
    # The definition's own bytes are what is saved: measured uncompressed (the worker shares
    # this client's codec; compression is ringflow/compression.py's, tested on its own).
    codec = temporal_client.data_converter.payload_codec.inner  # type: ignore[union-attr]
    assert isinstance(codec, EncryptionCodec)
    compressing, codec.compress = codec.compress, False
    try:
        async with running_worker(temporal_client, task_queue, sqlite_url):
            copied = await start(temporal_client, task_queue, definition)
            copied_rec = await happy_path(copied)
            by_ref = await start(temporal_client, task_queue, definition, flow_ref=v.ref)

            def whole(snap: Any) -> None:  # the agent gets the definition whole
                assert snap.definition.flow == definition.flow and snap.flow_ref == v.ref

            rec = await happy_path(by_ref, whole)
    finally:
        codec.compress = compressing
    assert rec.path == copied_rec.path and rec.disposition == copied_rec.disposition == "booked"
    history = await by_ref.handle.fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes.input.payloads[0]
    plain = await temporal_client.data_converter.payload_codec.inner.decode([started])  # type: ignore[union-attr]
    assert plain[0].metadata[REF_KEY] == v.version.encode() and b'"nodes"' not in plain[0].data
    decoded = await temporal_client.data_converter.decode([started], [CallInput])
    assert decoded[0].definition.flow == definition.flow and decoded[0].flow_ref == v.ref
    # the input and the attach's snapshot each held the definition; now neither does
    saved = await history_bytes(copied) - await history_bytes(by_ref)
    assert saved > 1.5 * len(flow_store.content_of(definition))


async def test_a_database_the_process_used_once_and_that_is_gone_is_passed_over(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """The codec looks a version up in every database this process used for versions: one
    that is gone now (a refused port here) must not fail the calls of another."""
    definition, v = published(sqlite_url)  # the test's database: a store of this process now
    gone = "postgresql://postgres@127.0.0.1:9/gone"  # the discard port: connection refused
    flow_store.remember_store(gone)  # used after it: looked at first
    assert flow_store.known_stores()[-1] == gone
    flow_store.forget_contents()
    try:
        async with running_worker(temporal_client, task_queue, sqlite_url):
            rec = await happy_path(await start(temporal_client, task_queue, definition, flow_ref=v.ref))
        assert rec.disposition == "booked"
        with pytest.raises(FlowVersionMissing, match="could not be read"):
            await FlowRefCodec().expand(Payload(metadata={REF_KEY: b"0" * 64}, data=b"{}"))
    finally:
        flow_store.forget_store(gone)


async def test_a_call_keeps_its_version_across_a_promotion_and_continue_as_new(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    _, v1 = published(sqlite_url)
    flow_store.promote(sqlite_url, v1.name, v1.version, "production")
    _, v2 = published(sqlite_url, retasked("Ask who is speaking, politely."))
    assert v2.version != v1.version
    async with running_worker(temporal_client, task_queue, sqlite_url):
        pinned = flow_store.resolve(sqlite_url, "clinic_reminder")
        assert pinned.version == v1.version
        call = await start(
            temporal_client,
            task_queue,
            flow_store.load_definition(sqlite_url, pinned.name, pinned.version),
            flow_ref=pinned.ref,
            max_history_events=50,
        )
        snap = await call.attach("agent-a")
        flow_store.promote(sqlite_url, v2.name, v2.version, "production")  # while the call runs
        b = Agent(call, epoch=snap.epoch, seq=snap.next_seq - 1)
        for i in range(40):
            await b.say(("user", f"turn {i}"))
        await wait_state(call, lambda s: s.runs >= 2 and s.turns == 40, timeout=60, what="a new run")
        again = await call.attach("agent-b")
        assert again.flow_ref == v1.ref
        assert again.definition.flow.nodes["verify"].task == clinic().flow.nodes["verify"].task
        assert flow_store.resolve(sqlite_url, "clinic_reminder@production").version == v2.version
    history = await call.handle.fetch_history()  # the current run's: its input names v1 too
    started = history.events[0].workflow_execution_started_event_attributes
    assert started.continued_execution_run_id
    plain = await temporal_client.data_converter.payload_codec.inner.decode(  # type: ignore[union-attr]
        [started.input.payloads[0]]
    )
    assert plain[0].metadata[REF_KEY] == v1.version.encode()


async def test_handler_code_that_is_not_the_published_code_is_refused_at_the_start(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    d = clinic()
    v = flow_store.publish(sqlite_url, d, {"clinic_handlers": "0" * 64})
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue, d, flow_ref=v.ref)
        with pytest.raises(WorkflowFailureError) as failed:
            await call.handle.result()
    why = str(failed.value.cause)
    assert f"is not the code flow version {v.version} was published with" in why
    assert "clinic_handlers" in why


async def test_a_campaign_by_reference_pins_its_calls_and_their_retries(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """The children's inputs name the campaign's version (no definition in the campaign's
    history), and a retry after a promotion still runs that version."""
    people = ["+12125550181", "+12125550182"]
    d, v1 = published(sqlite_url)
    _, v2 = published(sqlite_url, retasked("Ask who is speaking, politely."))
    cid = new_id()
    inp = campaign_input(cid, new_id("T"), retry={"busy": RetryRule(count=1, delay_s=0.5)}, cps=20)
    inp = inp.model_copy(update={"definition": d, "flow_ref": v1.ref})
    async with fake_line(monkeypatch) as lk:
        lk.set_answer(people[1], "busy")
        async with (
            running_worker(temporal_client, task_queue, sqlite_url, redis_url=REDIS),
            stand_in_agent(temporal_client, lk, {}),
        ):
            handle = await run_campaign(temporal_client, task_queue, sqlite_url, inp, contacts(*people))
            await wait_until(lambda: first_dialed(lk, people[1]), what="the busy contact's first dial")
            flow_store.promote(sqlite_url, v2.name, v2.version, "production")  # meanwhile
            assert (await handle.result())["status"] == "finished"
    tries = store.attempts(sqlite_url, cid)
    assert len(tries) == 3  # one each, and the busy contact's retry
    inner = temporal_client.data_converter.payload_codec.inner  # type: ignore[union-attr]
    for t in tries:
        history = await temporal_client.get_workflow_handle(f"call-{t['call_id']}").fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes.input.payloads[0]
        assert (await inner.decode([started]))[0].metadata[REF_KEY] == v1.version.encode()
    campaign = await temporal_client.get_workflow_handle(handle.id).fetch_history()
    starts = [
        e.start_child_workflow_execution_initiated_event_attributes.input.payloads[0]
        for e in campaign.events
        if e.HasField("start_child_workflow_execution_initiated_event_attributes")
    ]
    assert starts == []  # its drives start the calls: no call's input is in the campaign's history


async def first_dialed(lk: Any, phone: str) -> bool:
    return any(d.sip_call_to == phone for d in lk.dials)
