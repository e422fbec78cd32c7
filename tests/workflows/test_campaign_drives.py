"""A campaign's rounds start their calls themselves (``campaign_drive``): the campaign's
history holds one activity per drive, not a child's events per attempt, so a run holds far
more attempts before it continues as new; every attempt is still dialed once, across a
continue-as-new and a worker restart; a cancel stops the drive starting calls and the
campaign follows the calls the drive started to their end.

Real workflows, real Redis pacing, calls dialed against the LiveKit fake, the stand-in agent
ending each answered call (``tests/support/campaignkit.py``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from ringflow.activities import campaign_store as store
from tests.support.campaignkit import (
    REDIS,
    campaign_input,
    contacts,
    fake_line,
    new_id,
    progress,
    run_campaign,
    stand_in_agent,
)
from tests.support.wfkit import running_worker, wait_until

CHILD_EVENTS = {
    EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED,
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED,
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED,
}


async def _events(client: Client, workflow_id: str) -> list[Any]:
    """Every run's history events of the campaign (the first run onwards)."""
    out: list[Any] = []
    async for wf in client.list_workflows(f"WorkflowId = '{workflow_id}'"):
        history = await client.get_workflow_handle(workflow_id, run_id=wf.run_id).fetch_history()
        out.extend(history.events)
    return out


@pytest.mark.timeout(300)
async def test_a_run_holds_more_attempts_than_history_events(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    people = [f"+1212555{3100 + i}" for i in range(60)]
    async with (
        fake_line(monkeypatch) as lk,
        running_worker(temporal_client, task_queue, sqlite_url, redis_url=REDIS),
        stand_in_agent(temporal_client, lk),
    ):
        cid = new_id()
        inp = campaign_input(cid, new_id("T"), max_concurrent=30, cps=30)
        handle = await run_campaign(temporal_client, task_queue, sqlite_url, inp, contacts(*people))
        result = await handle.result()
        history = await handle.fetch_history()
    assert result["status"] == "finished" and result["stats"]["dialed"] == len(people)
    assert sorted(d.sip_call_to for d in lk.dials) == sorted(people)  # each once
    events = history.events
    assert not [e for e in events if e.event_type in CHILD_EVENTS]  # the calls have no parent
    # one run, the whole campaign in it: its events per attempt, from the real history
    assert len(events) / len(people) < 1.0, (len(events), len(people))


@pytest.mark.timeout(400)
async def test_no_attempt_is_dialed_twice_across_continue_as_new_and_a_worker_restart(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    people = [f"+1212555{3300 + i}" for i in range(40)]
    async with fake_line(monkeypatch) as lk, stand_in_agent(temporal_client, lk):
        cid = new_id()
        inp = campaign_input(cid, new_id("T"), max_concurrent=4, cps=4)
        # short drives and the fewest events a run may hold: it continues as new every few seconds
        inp = inp.model_copy(update={"max_history_events": 60, "drive_s": 0.2})
        async with running_worker(temporal_client, task_queue, sqlite_url, redis_url=REDIS):
            handle = await run_campaign(temporal_client, task_queue, sqlite_url, inp, contacts(*people))

            async def continued_and_dialing() -> bool:
                p = await progress(handle)
                return p["runs"] >= 2 and len(lk.dials) >= 10 and p["live"] > 0

            await wait_until(continued_and_dialing, timeout=200, what="a continue-as-new, calls live")
        # the worker stopped with a drive in flight (calls started, ringing, live): another finishes
        async with running_worker(temporal_client, task_queue, sqlite_url, redis_url=REDIS):
            result = await handle.result()
    assert result["status"] == "finished"
    rooms = Counter(d.room_name for d in lk.dials)
    assert [r for r, n in rooms.items() if n > 1] == []  # no call dialed twice
    phones = Counter(d.sip_call_to for d in lk.dials)
    assert sorted(phones) == sorted(people) and set(phones.values()) == {1}  # every contact, once
    tries = store.attempts(sqlite_url, cid)
    assert all(t["status"] in ("done", "not_dialed") for t in tries), tries
    assert {r["state"] for r in store.report(sqlite_url, cid)} == {"reached"}


@pytest.mark.timeout(300)
async def test_a_cancel_stops_the_drive_and_the_campaign_follows_the_calls_it_started(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    people = [f"+1212555{3500 + i}" for i in range(20)]
    hold = set(people[:3])
    async with (
        fake_line(monkeypatch) as lk,
        running_worker(temporal_client, task_queue, sqlite_url, redis_url=REDIS),
        stand_in_agent(temporal_client, lk, hold=hold),
    ):
        cid = new_id()
        inp = campaign_input(cid, new_id("T"), max_concurrent=3, cps=10)
        handle = await run_campaign(temporal_client, task_queue, sqlite_url, inp, contacts(*people))

        async def three_held() -> bool:
            return (await progress(handle))["live"] == 3 and len(lk.dials) == 3

        await wait_until(three_held, what="three calls the drive started, live")
        assert await handle.execute_update("cancel") == "cancelling"
        p = await progress(handle)
        assert p["status"] == "cancelling" and p["live"] == 3  # followed, never cut
        hold.clear()  # the held calls end now
        result = await handle.result()
    assert result["status"] == "cancelled"
    assert sorted(d.sip_call_to for d in lk.dials) == sorted(people[:3])  # nothing started after
    states = {r["phone"]: r["state"] for r in store.report(sqlite_url, cid)}
    assert [states[p] for p in people[:3]] == ["reached"] * 3  # their endings recorded
    assert all(states[p] == "pending" for p in people[3:])
    assert all(t["status"] == "done" for t in store.attempts(sqlite_url, cid))
