"""U+0000 and lone surrogates on PostgreSQL: one such character in a variable, a turn's text
or a contact's cell once made ``persist_call`` fail with ``DataError`` (jsonb refuses
``\\u0000``) and retry for ever, so the call never closed and its campaign never finished.
Real worker, real PostgreSQL, a local webhook endpoint; a plain Temporal client starts the
call, as a client that skips ``start_call``'s checks would."""

from __future__ import annotations

import pytest
from temporalio.client import Client

from ringflow.activities import campaign_store as store
from ringflow.callflow.safe_text import REPLACEMENT
from ringflow.contract.call import CallInput, call_workflow_id
from ringflow.contract.records import CallRecord
from ringflow.workflows.client import CallHandle
from tests.support.campaignkit import REDIS, campaign_input, fake_line, new_id, run_campaign, stand_in_agent
from tests.support.hostile import finished, raw_json, worker_with_hooks
from tests.support.wfkit import Agent, clinic, running_worker


async def test_nul_in_a_variable_and_a_turn_is_replaced_and_the_record_is_written(
    temporal_client: Client, task_queue: str, postgres_url: str
) -> None:
    async with worker_with_hooks(temporal_client, task_queue, postgres_url) as hooks:
        inp = CallInput(call_id=new_id("nul"), definition=clinic(), variables={"patient": "Al\x00ex"})
        handle = await temporal_client.start_workflow(
            "CallWorkflow",
            inp,
            id=call_workflow_id(inp.call_id),
            task_queue=task_queue,
            result_type=CallRecord,
        )
        call = CallHandle(temporal_client, inp.call_id, handle)
        agent = Agent(call)
        eid, seq = agent.next()
        # a NUL and a lone surrogate, as JSON escapes the way any client can send them
        await handle.signal(
            "turns",
            raw_json(
                f'{{"event_id": "{eid}", "seq": {seq}, '
                '"items": [{"role": "user", "text": "yes\\u0000 it is \\ud800 me"}]}'
            ),
        )
        await agent.transition("verify", "confirmed")
        await agent.transition("offer", "wants_human")
        out = await finished(call, hooks, postgres_url)
    stored = out["stored"]
    assert stored.variables["patient"] == f"Al{REPLACEMENT}ex"
    assert [t["text"] for t in stored.transcript] == [f"yes{REPLACEMENT} it is {REPLACEMENT} me"]
    assert out["result"].end_reason == "completed"


async def test_a_campaign_with_a_nul_in_a_contact_finishes(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, postgres_url: str
) -> None:
    phone = "+12125550191"
    people = [store.Contact(phone=phone, tz="UTC", variables={"patient": "P\x00Q"})]
    cid = new_id()
    inp = campaign_input(cid, new_id("T"), max_concurrent=1, cps=5, max_attempts=1)
    async with (
        fake_line(monkeypatch) as lk,
        running_worker(temporal_client, task_queue, postgres_url, redis_url=REDIS),
        stand_in_agent(temporal_client, lk),
    ):
        handle = await run_campaign(temporal_client, task_queue, postgres_url, inp, people)
        result = await handle.result()
    assert result["status"] == "finished"
    rows = store.report(postgres_url, cid)
    assert [(r["phone"], r["state"]) for r in rows] == [(phone, "reached")]
