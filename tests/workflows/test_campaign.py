"""Campaigns end to end: a real CampaignWorkflow on a real Temporal dev server, contacts and
attempts in SQLite or PostgreSQL, pacing in the real Redis, each call a real child
CallWorkflow dialed through the LiveKit telephony code against the protocol-level fake."""

from __future__ import annotations

import json
from typing import Any

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError

from ringflow.activities import campaign_store as store
from ringflow.activities.campaign_rules import RetryRule
from ringflow.activities.search_attributes import RINGFLOW_CAMPAIGN, RINGFLOW_STATUS
from ringflow.simulation.livekit_fake import FakeLiveKit
from ringflow.workflows.client import CallHandle
from tests.support.campaignkit import (
    REDIS,
    campaign_input,
    contacts,
    fake_line,
    new_id,
    run_campaign,
    stand_in_agent,
)
from tests.support.loopback import Receiver
from tests.support.wfkit import running_worker, wait_until


async def test_each_outcome_is_retried_by_its_rule_and_a_reached_contact_is_never_called_again(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, database_url: str
) -> None:
    people = ["+12125550101", "+12125550102", "+12125550103", "+12125550104", "+12125550105", "+12125550106"]
    async with fake_line(monkeypatch) as lk:
        lk.set_answer(people[1], "busy")
        lk.set_answer(people[2], "no_answer")
        lk.set_answer(people[3], "failed")
        lk.set_answer(people[4], "human")  # the stand-in agent ends it as voicemail
        lk.set_answer(people[5], "human")  # ...and this one as agent_lost
        retry = {
            "busy": RetryRule(count=2, delay_s=0.2),
            "no_answer": RetryRule(count=1, delay_s=0.2),
            "dial_failed": RetryRule(count=0, delay_s=0),
            "voicemail": RetryRule(count=1, delay_s=0.2),
            "agent_lost": RetryRule(count=1, delay_s=0.2),
        }
        cid = new_id()
        inp = campaign_input(cid, new_id("T"), retry=retry, max_concurrent=3, cps=20, max_attempts=5)
        async with (
            running_worker(temporal_client, task_queue, database_url, redis_url=REDIS),
            stand_in_agent(temporal_client, lk, {people[4]: "voicemail", people[5]: "agent_lost"}),
        ):
            handle = await run_campaign(temporal_client, task_queue, database_url, inp, contacts(*people))
            result = await handle.result()
    assert result["status"] == "finished"
    rows = {r["phone"]: r for r in store.report(database_url, cid)}
    assert rows[people[0]]["state"] == "reached" and rows[people[0]]["attempts"] == 1
    busy = rows[people[1]]
    assert (busy["attempts"], busy["outcome"], busy["state"]) == (3, "busy", "failed")
    assert (rows[people[2]]["attempts"], rows[people[2]]["state"]) == (2, "failed")
    assert (rows[people[3]]["attempts"], rows[people[3]]["outcome"]) == (1, "dial_failed")
    assert (rows[people[4]]["attempts"], rows[people[4]]["outcome"]) == (2, "voicemail")
    assert (rows[people[5]]["attempts"], rows[people[5]]["outcome"]) == (2, "agent_lost")
    dialed = [d.sip_call_to for d in lk.dials]
    assert sorted(dialed) == sorted(
        [people[0]] + [people[1]] * 3 + [people[2]] * 2 + [people[3]] + [people[4]] * 2 + [people[5]] * 2
    )
    rooms = [d.room_name for d in lk.dials]
    assert len(rooms) == len(set(rooms))  # one dial per attempt
    tries = store.attempts(database_url, cid)
    assert len(tries) == len(dialed) and all(t["status"] == "done" for t in tries)
    desc = await temporal_client.get_workflow_handle(f"call-{tries[0]['call_id']}").describe()
    assert desc.typed_search_attributes.get(RINGFLOW_CAMPAIGN) == cid


async def progress(handle: Any) -> dict[str, Any]:
    return await handle.query("progress")


async def test_pause_stops_new_dials_resume_goes_on_and_cancel_lets_the_live_call_finish(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    people = [f"+1212555020{i}" for i in range(5)]
    hold = {people[0], people[2]}
    async with (
        fake_line(monkeypatch) as lk,
        running_worker(temporal_client, task_queue, sqlite_url, redis_url=REDIS),
        stand_in_agent(temporal_client, lk, hold=hold),
    ):
        cid = new_id()
        inp = campaign_input(cid, new_id("T"), max_concurrent=1, cps=50)
        handle = await run_campaign(temporal_client, task_queue, sqlite_url, inp, contacts(*people))
        await wait_until(lambda: _live(temporal_client, lk, people[0]), what="the first call live")
        assert await handle.execute_update("pause", "lunch") == "paused"
        hold.discard(people[0])
        await wait_until(lambda: _settled(handle), what="paused with nothing in flight")
        dials_paused = len(lk.dials)
        assert dials_paused == 1 and (await progress(handle))["pause_reason"] == "lunch"
        desc = await handle.describe()
        assert desc.typed_search_attributes.get(RINGFLOW_STATUS) == "paused"
        assert desc.typed_search_attributes.get(RINGFLOW_CAMPAIGN) == cid
        assert await handle.execute_update("resume") == "running"
        await wait_until(lambda: _live(temporal_client, lk, people[2]), what="the third call live")
        assert await handle.execute_update("cancel") == "cancelling"
        call = CallHandle(temporal_client, next(d.room_name for d in lk.dials if d.sip_call_to == people[2]))
        assert (await call.state()).status == "live"  # cancelling never cuts a live call
        hold.discard(people[2])
        result = await handle.result()
        record = await call.handle.result()
    assert result["status"] == "cancelled" and record.end_reason == "user_hangup"
    assert [d.sip_call_to for d in lk.dials] == people[:3]
    states = {r["phone"]: r["state"] for r in store.report(sqlite_url, cid)}
    assert [states[p] for p in people] == ["reached", "reached", "reached", "pending", "pending"]


async def _live(client: Client, lk: FakeLiveKit, phone: str) -> bool:
    for d in lk.dials:
        if d.sip_call_to == phone:
            return (await CallHandle(client, d.room_name).state()).status == "live"
    return False


async def _settled(handle: Any) -> bool:
    p = await progress(handle)
    return p["status"] == "paused" and p["live"] == 0 and p["starting"] == 0


async def test_a_number_added_to_do_not_call_mid_campaign_is_not_dialed(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, database_url: str
) -> None:
    people = ["+12125550301", "+12125550302", "+12125550303"]
    hold = {people[0]}
    async with (
        fake_line(monkeypatch) as lk,
        running_worker(temporal_client, task_queue, database_url, redis_url=REDIS),
        stand_in_agent(temporal_client, lk, hold=hold),
    ):
        cid = new_id()
        inp = campaign_input(cid, new_id("T"), max_concurrent=1, cps=50)
        handle = await run_campaign(temporal_client, task_queue, database_url, inp, contacts(*people))
        await wait_until(lambda: _live(temporal_client, lk, people[0]), what="the first call live")
        store.add_dnc(database_url, [people[2]], now=0)
        hold.clear()
        result = await handle.result()
    assert result["status"] == "finished"
    assert [d.sip_call_to for d in lk.dials] == people[:2]
    states = {r["phone"]: r["state"] for r in store.report(database_url, cid)}
    assert states[people[2]] == "dnc"


async def test_two_campaigns_on_one_trunk_share_its_pace(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    cps, n = 5.0, 6
    trunk = new_id("T")
    async with (
        fake_line(monkeypatch) as lk,
        running_worker(temporal_client, task_queue, sqlite_url, redis_url=REDIS),
        stand_in_agent(temporal_client, lk),
    ):
        a, b = new_id("a"), new_id("b")
        ha = await run_campaign(
            temporal_client,
            task_queue,
            sqlite_url,
            campaign_input(a, trunk, max_concurrent=10, cps=cps),
            contacts(*[f"+1212555040{i}" for i in range(n)]),
        )
        hb = await run_campaign(
            temporal_client,
            task_queue,
            sqlite_url,
            campaign_input(b, trunk, max_concurrent=10, cps=cps),
            contacts(*[f"+1212555050{i}" for i in range(n)]),
        )
        await ha.result()
        await hb.result()
    times = sorted(t["dialed_at"] for cid in (a, b) for t in store.attempts(sqlite_url, cid))
    assert len(times) == 2 * n == len(lk.dials)
    # every attempt waited for its own slot on the trunk: 12 attempts at 5/s span at least 11 slots
    # (each campaign alone would have been done in a little over one second)
    assert times[-1] - times[0] >= (2 * n - 1) / cps - 0.3


async def test_without_redis_the_campaign_pauses_and_says_why(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with fake_line(monkeypatch) as lk, running_worker(temporal_client, task_queue, sqlite_url):
        cid = new_id()
        handle = await run_campaign(
            temporal_client,
            task_queue,
            sqlite_url,
            campaign_input(cid, new_id("T")),
            contacts("+12125550601"),
        )
        p = await wait_until(lambda: _paused(handle), what="paused for lack of Redis")
        assert "RINGFLOW_REDIS_URL" in p["pause_reason"] and not lk.dials
        assert [r["state"] for r in store.report(sqlite_url, cid)] == ["pending"]  # nothing was claimed
        await handle.execute_update("cancel")
        assert (await handle.result())["status"] == "cancelled"


async def _paused(handle: Any) -> dict[str, Any] | None:
    p = await progress(handle)
    return p if p["status"] == "paused" and p["starting"] == 0 else None


async def test_post_call_webhooks_carry_the_campaign_and_a_finished_webhook_follows(
    monkeypatch: pytest.MonkeyPatch,
    temporal_client: Client,
    task_queue: str,
    sqlite_url: str,
    receiver: Receiver,
) -> None:
    people = ["+12125550801", "+12125550802"]
    async with fake_line(monkeypatch) as lk:
        lk.set_answer(people[1], "busy")
        cid = new_id()
        async with (
            running_worker(
                temporal_client, task_queue, sqlite_url, redis_url=REDIS, webhook_url=receiver.url
            ),
            stand_in_agent(temporal_client, lk),
        ):
            handle = await run_campaign(
                temporal_client,
                task_queue,
                sqlite_url,
                campaign_input(cid, new_id("T"), cps=20),
                contacts(*people),
            )
            await handle.result()
            await receiver.wait_for(3)
    events = [(h.get("X-Ringflow-Event"), json.loads(body)) for h, body in receiver.deliveries]
    calls = [b for e, b in events if e != "campaign.finished"]
    assert sorted(b["call_id"] for b in calls) == [f"{cid}-0-1", f"{cid}-1-1"]
    assert {b["campaign_id"] for b in calls} == {cid}
    assert sorted(b["end_reason"] for b in calls) == ["busy", "user_hangup"]
    (done,) = [b for e, b in events if e == "campaign.finished"]
    assert done["campaign_id"] == cid and done["status"] == "finished" and done["flow"] == "clinic_reminder"
    assert done["stats"]["dialed"] == 2


async def test_limits_change_while_it_runs_and_bad_limits_are_refused(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    people = [f"+1212555090{i}" for i in range(4)]
    hold = set(people)
    async with (
        fake_line(monkeypatch) as lk,
        running_worker(temporal_client, task_queue, sqlite_url, redis_url=REDIS),
        stand_in_agent(temporal_client, lk, hold=hold),
    ):
        cid = new_id()
        inp = campaign_input(cid, new_id("T"), max_concurrent=1, cps=50)
        handle = await run_campaign(temporal_client, task_queue, sqlite_url, inp, contacts(*people))
        await wait_until(lambda: _live(temporal_client, lk, people[0]), what="the first call live")
        with pytest.raises(WorkflowUpdateFailedError) as zero:
            await handle.execute_update("set_limits", {"cps": 0})
        assert "greater than 0" in str(zero.value.cause)
        with pytest.raises(WorkflowUpdateFailedError):  # not limits at all
            await handle.execute_update("set_limits", "fast please")
        assert (await progress(handle))["limits"]["cps"] == 50
        limits = await handle.execute_update("set_limits", {"max_concurrent": 3})
        assert limits["max_concurrent"] == 3 and limits["cps"] == 50
        await wait_until(lambda: _at_least_live(temporal_client, lk, 3), what="three calls live at once")
        assert len(lk.dials) == 3  # never more than the new limit
        hold.clear()
        result = await handle.result()
    assert result["status"] == "finished" and len(lk.dials) == 4


async def _at_least_live(client: Client, lk: FakeLiveKit, n: int) -> bool:
    live = 0
    for d in list(lk.dials):
        live += (await CallHandle(client, d.room_name).state()).status == "live"
    return live >= n
