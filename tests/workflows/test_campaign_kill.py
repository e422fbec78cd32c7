"""A campaign survives its worker's SIGKILL and a restart of the Temporal server: every
contact is still attempted exactly as the rules say, and no attempt is dialed twice.

The first worker is a separate process (``tests/support/campaign_worker_child.py``) killed with
SIGKILL mid-campaign, with attempts pacing, ringing and live; then the dev server is stopped
and started again (same data); a worker in this process finishes the campaign."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest
from temporalio.client import Client

from ringflow.activities import campaign_store as store
from ringflow.activities.campaign_rules import RetryRule
from ringflow.devstack import DevStack
from ringflow.temporal_setup import connect
from tests.support.campaignkit import (
    REDIS,
    campaign_input,
    contacts,
    fake_line,
    new_id,
    run_campaign,
    stand_in_agent,
)
from tests.support.paths import ROOT
from tests.support.wfkit import running_worker, wait_until


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-2000:] if path.exists() else "(no stderr)"


@pytest.mark.timeout(400)
async def test_a_sigkilled_worker_and_a_restarted_server_leave_every_attempt_exactly_once(
    monkeypatch: pytest.MonkeyPatch,
    temporal_server: DevStack,
    temporal_client: Client,
    task_queue: str,
    sqlite_url: str,
    tmp_path: Path,
) -> None:
    people = [f"+1212555{9100 + i}" for i in range(12)]
    busy = people[:3]
    async with fake_line(monkeypatch) as lk:
        for p in busy:
            lk.set_answer(p, "busy")
        cid = new_id()
        inp = campaign_input(
            cid, new_id("T"), retry={"busy": RetryRule(count=1, delay_s=1.0)}, max_concurrent=3, cps=4
        )
        errors_path = tmp_path / "child-stderr.txt"
        errors = errors_path.open("wb")  # why the child died, should it die before READY
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.support.campaign_worker_child",
            "--address",
            temporal_server.address,
            "--task-queue",
            task_queue,
            "--database-url",
            sqlite_url,
            "--redis-url",
            REDIS,
            "--livekit-url",
            lk.url,
            "--livekit-key",
            lk.api_key,
            "--livekit-secret",
            lk.api_secret,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"},
            stdout=asyncio.subprocess.PIPE,
            stderr=errors,
        )
        try:
            assert proc.stdout is not None
            line = (await asyncio.wait_for(proc.stdout.readline(), 60)).strip()
            assert line == b"READY", f"the worker child did not start: {_tail(errors_path)}"
            async with stand_in_agent(temporal_client, lk):
                handle = await run_campaign(temporal_client, task_queue, sqlite_url, inp, contacts(*people))
                await wait_until(lambda: _at_least(lk, 5), timeout=120, what="five dials")
                proc.send_signal(signal.SIGKILL)
                assert await asyncio.wait_for(proc.wait(), 10) == -signal.SIGKILL
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            errors.close()
        temporal_server.stop()
        await temporal_server.start()
        client = await connect(temporal_server.address, temporal_server.namespace)
        async with (
            running_worker(client, task_queue, sqlite_url, redis_url=REDIS),
            stand_in_agent(client, lk),
        ):
            result = await asyncio.wait_for(client.get_workflow_handle(handle.id).result(), 300)
    assert result["status"] == "finished"
    rooms = [d.room_name for d in lk.dials]
    assert len(rooms) == len(set(rooms))  # no attempt dialed twice
    rows = {r["phone"]: r for r in store.report(sqlite_url, cid)}
    assert {p: (rows[p]["attempts"], rows[p]["state"]) for p in people} == {
        p: (2, "failed") if p in busy else (1, "reached") for p in people
    }
    dialed = sorted(d.sip_call_to for d in lk.dials)
    assert dialed == sorted(people + busy)
    tries = store.attempts(sqlite_url, cid)
    assert sorted((t["idx"], t["attempt"]) for t in tries if t["status"] == "done") == sorted(
        {(i, 1) for i in range(12)} | {(i, 2) for i in range(3)}
    )


async def _at_least(lk: object, n: int) -> bool:
    return len(lk.dials) >= n  # type: ignore[attr-defined]
