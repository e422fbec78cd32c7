"""Campaign control at the awkward moments: a retry that falls due while the campaign is
paused, a cancel while calls still ring, and ``campaign status --watch`` following a live
campaign to its end. Real workflows, real Redis pacing, calls dialed against the LiveKit fake."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

import pytest
from sqlalchemy import select
from temporalio.client import Client

from ringflow.activities import campaign_store as store
from ringflow.activities.campaign_rules import RetryRule
from ringflow.contract.dial import Dial
from ringflow.devstack import DevStack
from ringflow.workflows.campaign_messages import CampaignCarry
from ringflow.workflows.client import CallHandle, start_call
from tests.support.campaignkit import (
    REDIS,
    campaign_input,
    campaign_line,
    contacts,
    live_on,
    new_id,
    progress,
    run_campaign,
)
from tests.support.paths import ROOT
from tests.support.wfkit import wait_until


def _contact_row(database_url: str, cid: str, idx: int) -> dict[str, Any]:
    engine = store.engine_for(database_url)
    C = store.C
    with engine.connect() as conn:
        row = conn.execute(
            select(C.c.state, C.c.next_at, C.c.attempts).where(C.c.campaign_id == cid, C.c.idx == idx)
        ).one()
    return dict(row._mapping)


async def test_a_retry_that_falls_due_during_a_pause_waits_for_the_resume(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    a, b = "+12125551001", "+12125551002"
    hold = {a}
    async with campaign_line(
        monkeypatch, temporal_client, task_queue, sqlite_url, {a: "voicemail"}, hold
    ) as lk:
        cid = new_id()
        retry = {"voicemail": RetryRule(count=1, delay_s=0.5)}
        inp = campaign_input(cid, new_id("T"), retry=retry, max_concurrent=1, cps=50)
        handle = await run_campaign(temporal_client, task_queue, sqlite_url, inp, contacts(a, b))
        await wait_until(lambda: live_on(temporal_client, lk, a), what="a's call live")
        assert await handle.execute_update("pause", "meeting") == "paused"
        hold.clear()  # a's call ends as voicemail now: its retry falls due while paused

        async def retry_due_while_paused() -> bool:
            p = await progress(handle)
            settled = p["status"] == "paused" and not (p["live"] or p["starting"] or p["rounds"])
            row = _contact_row(sqlite_url, cid, 0)
            return (
                settled
                and p["ended_not_recorded"] == 0
                and row["state"] == "retry"
                and row["next_at"] <= time.time()
            )

        await wait_until(retry_due_while_paused, timeout=60, what="a's retry due, the campaign paused")
        assert [d.sip_call_to for d in lk.dials] == [a]  # due, but not dialed while paused
        assert await handle.execute_update("resume") == "running"
        result = await handle.result()
    assert result["status"] == "finished"
    assert sorted(d.sip_call_to for d in lk.dials) == [a, a, b]
    rows = {r["phone"]: r for r in store.report(sqlite_url, cid)}
    assert (rows[a]["attempts"], rows[a]["outcome"], rows[a]["state"]) == (2, "voicemail", "failed")
    assert (rows[b]["attempts"], rows[b]["state"]) == (1, "reached")


async def test_cancel_while_calls_ring_lets_them_finish_and_starts_no_new_one(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, database_url: str
) -> None:
    people = [f"+1212555110{i}" for i in range(4)]
    ringing = people[:3]
    async with campaign_line(monkeypatch, temporal_client, task_queue, database_url) as lk:
        lk.ring_gates = {p: asyncio.Event() for p in ringing}
        cid = new_id()
        inp = campaign_input(cid, new_id("T"), max_concurrent=3, cps=50)
        inp = inp.model_copy(update={"ringing_timeout_s": 120})
        handle = await run_campaign(temporal_client, task_queue, database_url, inp, contacts(*people))

        async def all_ringing() -> bool:
            return all([await live_on(temporal_client, lk, p, "dialing") for p in ringing])

        await wait_until(all_ringing, timeout=60, what="three calls ringing")
        assert await handle.execute_update("cancel") == "cancelling"
        calls = [CallHandle(temporal_client, d.room_name) for d in lk.dials]
        assert [(await c.state()).status for c in calls] == ["dialing"] * 3  # none was cut
        for gate in lk.ring_gates.values():
            gate.set()  # answered after the cancel: each call runs to its end
        records = [await c.handle.result() for c in calls]
        result = await handle.result()
    assert result["status"] == "cancelled"
    assert [r.end_reason for r in records] == ["user_hangup"] * 3
    assert sorted(d.sip_call_to for d in lk.dials) == ringing  # the fourth was never dialed
    states = {r["phone"]: r["state"] for r in store.report(database_url, cid)}
    assert [states[p] for p in people] == ["reached", "reached", "reached", "pending"]


async def test_status_watch_shows_progress_live_and_ends_with_the_campaign(
    monkeypatch: pytest.MonkeyPatch,
    temporal_server: DevStack,
    temporal_client: Client,
    task_queue: str,
    sqlite_url: str,
) -> None:
    people = ["+12125551201", "+12125551202"]
    hold = set(people)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RINGFLOW_TEMPORAL_ADDRESS": temporal_server.address,
        "RINGFLOW_TEMPORAL_NAMESPACE": temporal_server.namespace,
        "RINGFLOW_DATABASE_URL": sqlite_url,
        "RINGFLOW_REDIS_URL": REDIS,
    }
    async with campaign_line(monkeypatch, temporal_client, task_queue, sqlite_url, hold=hold):
        cid = new_id()
        inp = campaign_input(cid, new_id("T"), max_concurrent=2, cps=50)
        handle = await run_campaign(temporal_client, task_queue, sqlite_url, inp, contacts(*people))
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "ringflow.cli",
            "campaign",
            "status",
            cid,
            "--watch",
            "--interval",
            "0.2",
            cwd=ROOT,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            assert proc.stdout is not None
            seen: list[str] = []

            async def line_with(text: str) -> str:
                while True:
                    raw = await proc.stdout.readline()  # type: ignore[union-attr]
                    assert raw, f"watch ended before showing {text!r}: {seen}"
                    seen.append(raw.decode())
                    if text in seen[-1]:
                        return seen[-1]

            await asyncio.wait_for(line_with(f"{cid}: running · live 2"), 60)
            hold.clear()  # both calls end: the display follows, then the campaign is done
            await asyncio.wait_for(line_with(f"{cid}: finished"), 60)
            assert "contacts: reached 2" in (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
            assert await asyncio.wait_for(proc.wait(), 30) == 0  # it exits with the campaign
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert (await handle.result())["status"] == "finished"


async def test_a_campaign_continued_as_new_many_times_attempts_each_contact_as_the_rules_say(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    people = [f"+1212555{1300 + i}" for i in range(30)]
    busy = set(people[::5])
    async with campaign_line(monkeypatch, temporal_client, task_queue, sqlite_url) as lk:
        for p in busy:
            lk.set_answer(p, "busy")
        cid = new_id()
        retry = {"busy": RetryRule(count=1, delay_s=0.2)}
        inp = campaign_input(cid, new_id("T"), retry=retry, max_concurrent=6, cps=40)
        # short drives, few events a run: it continues as new
        inp = inp.model_copy(update={"max_history_events": 60, "drive_s": 0.2})
        handle = await run_campaign(temporal_client, task_queue, sqlite_url, inp, contacts(*people))
        result = await handle.result()

        async def runs() -> bool:  # the list (visibility) lags the workflow a little
            return (
                len([wf async for wf in temporal_client.list_workflows(f"WorkflowId = '{handle.id}'")]) >= 2
            )

        await wait_until(runs, timeout=30, what="the campaign's runs listed")
    assert result["status"] == "finished"
    rooms = [d.room_name for d in lk.dials]
    assert len(rooms) == len(set(rooms))  # no attempt dialed twice
    assert sorted(d.sip_call_to for d in lk.dials) == sorted(people + list(busy))
    rows = {r["phone"]: r for r in store.report(sqlite_url, cid)}
    assert {p: (rows[p]["attempts"], rows[p]["state"]) for p in people} == {
        p: (2, "failed") if p in busy else (1, "reached") for p in people
    }


async def test_calls_handed_over_unconfirmed_by_the_last_run_start_once_each(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """A run continues as new without waiting for its last calls' starts to be confirmed; the
    next run starts them again under the same ids: one whose start went through is followed,
    one whose start the server dropped (its parent run had closed) is started now."""
    people = ["+12125551501", "+12125551502", "+12125551503"]
    async with campaign_line(monkeypatch, temporal_client, task_queue, sqlite_url) as lk:
        cid = new_id()
        inp = campaign_input(cid, new_id("T"), max_concurrent=3, cps=50)
        now = time.time()
        store.add_contacts(sqlite_url, cid, contacts(*people), 0, now)
        handed = store.claim(sqlite_url, cid, "claim-0", 2, inp.windows, 3, now).claimed
        assert [store.predial(sqlite_url, cid, c.idx, c.attempt, inp.windows, now) for c in handed] == [
            "go"
        ] * 2
        first = handed[0]  # its start went through before the last run closed
        await start_call(
            temporal_client,
            inp.definition,
            task_queue=task_queue,
            call_id=first.call_id,
            variables=first.variables,
            dial=Dial(to=first.phone, trunk_id=inp.trunk_id, ringing_timeout_s=5),
            campaign_id=cid,
        )
        carry = CampaignCarry(limits=inp.limits, claims=1, runs=2, to_start=handed)
        handle = await run_campaign(
            temporal_client, task_queue, sqlite_url, inp.model_copy(update={"carry": carry}), []
        )
        result = await handle.result()
    assert result["status"] == "finished"
    assert sorted(d.sip_call_to for d in lk.dials) == people  # each once
    rows = {r["phone"]: r for r in store.report(sqlite_url, cid)}
    assert {p: (rows[p]["attempts"], rows[p]["state"]) for p in people} == {p: (1, "reached") for p in people}
