"""A worker SIGKILLed while a handler runs: Temporal retries the activity on another worker,
and the retried handler gets the same ``flow_manager.idempotency_key`` (``<call id>:<event
id>``), so a back end that de-duplicates on it books once; the call moves on as if the
first worker had answered."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from temporalio.client import Client

from ringflow.callflow.loader import load_flow
from ringflow.contract.updates import CallFunctionRequest
from ringflow.devstack import DevStack
from ringflow.workflows.client import start_call
from tests.support.paths import TESTS
from tests.support.wfkit import flows_worker_child, running_worker, wait_state, wait_until

FIXTURE = TESTS / "fixtures" / "handler_retry"


def written(path: Path) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return path.exists()

    return check


@pytest.mark.timeout(300)
async def test_a_retried_handler_sees_the_same_idempotency_key(
    monkeypatch: pytest.MonkeyPatch,
    temporal_server: DevStack,
    temporal_client: Client,
    task_queue: str,
    sqlite_url: str,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("RINGFLOW_HANDLER_RETRY_DIR", str(tmp_path))
    proc = await flows_worker_child(temporal_server.address, task_queue, sqlite_url, FIXTURE)
    call = await start_call(
        temporal_client, load_flow(FIXTURE / "flow.yaml"), task_queue=task_queue, agent_timeout_s=600
    )
    event_id = "t0:1:fn:book_table"
    answer = asyncio.ensure_future(
        call.call_function(CallFunctionRequest(event_id=event_id, node="start", name="book_table"))
    )
    first = tmp_path / "attempt.1"
    try:
        await wait_until(written(first), timeout=60, what="the handler's first attempt on the child worker")
        assert json.loads(first.read_text())["pid"] == proc.pid
        proc.send_signal(signal.SIGKILL)
        assert await asyncio.wait_for(proc.wait(), 10) == -signal.SIGKILL
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()

    async with running_worker(temporal_client, task_queue, sqlite_url, flows_dir=str(FIXTURE)):
        second = tmp_path / "attempt.2"
        await wait_until(written(second), timeout=60, what="Temporal to retry the handler on this worker")
        (tmp_path / "release").write_text("go")
        result = await asyncio.wait_for(answer, 60)
        assert not result.error and result.result == {"booked": True}, result
        assert result.node == "done"
        key = f"{call.call_id}:{event_id}"
        markers = [json.loads(p.read_text()) for p in (first, second)]
        assert [m["key"] for m in markers] == [key, key]  # the retry saw the first attempt's key
        assert markers[1]["pid"] != proc.pid  # another worker ran it
        assert (tmp_path / "bookings.log").read_text().splitlines() == [key]  # booked once
        await call.hangup()
        record = await asyncio.wait_for(call.handle.result(), 60)
        assert record.path == ["start", "done"]


async def test_a_handler_the_flow_runs_gets_a_key_of_its_run(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """An action node's handler has no agent event behind it: its key is ``<call id>:<run id>``,
    fixed by the workflow's history, never the empty string."""
    async with running_worker(temporal_client, task_queue, sqlite_url, flows_dir=str(FIXTURE)):
        call = await start_call(
            temporal_client, load_flow(FIXTURE / "action.yaml"), task_queue=task_queue, agent_timeout_s=600
        )
        view = await wait_state(call, lambda v: v.node == "done", what="the action node to run")
        key = view.state["noted"]["key"]
        prefix, _, run = key.rpartition(":")
        assert prefix == call.call_id and run.isdigit(), key
        await call.hangup()
        await asyncio.wait_for(call.handle.result(), 60)
