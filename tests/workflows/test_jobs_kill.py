"""A worker SIGKILLed while a job group runs: the job it was running is retried on another
worker with the same idempotency key, finishes once, and the group ends as if nothing had
happened (every job completed once, routed on 'completed')."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest
from temporalio.client import Client

from ringflow.callflow.loader import load_flow
from ringflow.contract.updates import CallFunctionRequest, CallFunctionResult, RouteRequest
from ringflow.devstack import DevStack
from ringflow.workflows.client import start_call
from tests.support.paths import TESTS
from tests.support.wfkit import flows_worker_child, running_worker, wait_until

FIXTURE = TESTS / "fixtures" / "jobs_kill"


@pytest.mark.timeout(300)
async def test_a_worker_killed_mid_group_neither_loses_nor_repeats_a_job(
    monkeypatch: pytest.MonkeyPatch,
    temporal_server: DevStack,
    temporal_client: Client,
    task_queue: str,
    sqlite_url: str,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("RINGFLOW_JOBS_KILL_DIR", str(tmp_path))
    proc = await flows_worker_child(temporal_server.address, task_queue, sqlite_url, FIXTURE)
    try:
        call = await start_call(
            temporal_client, load_flow(FIXTURE / "flow.yaml"), task_queue=task_queue, agent_timeout_s=600
        )
        started = await call.call_function(
            CallFunctionRequest(event_id="t0:1:fn:check", node="start", name="check")
        )
        assert started.result["status"] == "started", started
        gid = started.result["group_id"]
        child_attempt = tmp_path / f"attempt.{proc.pid}"

        async def child_running() -> bool:
            # its marker, and its progress update applied by the workflow: the job writes the
            # marker before it sends the update, and a kill between the two lost the update
            if not child_attempt.exists():
                return False
            log = await call.handle.query("jobs_feed", 0)
            return {"attempt_pid": proc.pid} in [
                e["data"] for e in log["envelopes"] if e["type"] == "job_update"
            ]

        await wait_until(child_running, timeout=60, what="the slow job to start on the child worker")
        proc.send_signal(signal.SIGKILL)
        assert await asyncio.wait_for(proc.wait(), 10) == -signal.SIGKILL
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()

    async with running_worker(temporal_client, task_queue, sqlite_url, flows_dir=str(FIXTURE)):
        (tmp_path / "release").write_text("go")

        async def finished() -> dict | None:
            feed = await call.handle.query("jobs_feed", -1)
            return feed if feed["unrouted"] else None

        feed = await wait_until(finished, timeout=120, what="the group to finish on the new worker")
        assert feed["unrouted"][0]["outcome"] == "completed"
        log = await call.handle.query("jobs_feed", 0)
        ends = [(e["job"], e["status"]) for e in log["envelopes"] if e["type"] == "job_completed"]
        assert sorted(ends) == [("quick_job", "completed"), ("slow_job", "completed")]
        assert [e["type"] for e in log["envelopes"]].count("group_completed") == 1
        progress = [e["data"] for e in log["envelopes"] if e["type"] == "job_update"]
        assert {"attempt_pid": proc.pid} in progress  # flow_manager.update, from the killed worker too
        key = f"{call.call_id}:{gid}:slow_job"
        attempts = sorted(tmp_path.glob("attempt.*"))
        assert len(attempts) >= 2 and {a.read_text() for a in attempts} == {key}  # retried, same key
        assert (tmp_path / "work.log").read_text().splitlines() == [key]  # done once
        routed = await call.handle.execute_update(
            "route_jobs", RouteRequest(group_id=gid), result_type=CallFunctionResult
        )
        assert routed.node == "done" and routed.state is not None
        assert routed.state.state["check"]["jobs"]["slow_job"] == {
            "status": "completed",
            "result": {"worked": True},
        }
        await call.hangup()
        record = await asyncio.wait_for(call.handle.result(), 60)
        assert record.path == ["start", "done"]
        assert any(t["text"].startswith("[jobs] group") for t in record.transcript if t["role"] == "system")
