"""Faults a durable call must survive: a killed worker, a restarted server, flaky activities,
long calls that continue-as-new. All against a real dev server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

import pytest
from temporalio.client import Client

from ringflow.activities.persistence import load_transcript
from ringflow.devstack import DevStack, free_port
from tests.support.loopback import flaky_api
from tests.support.wfkit import Agent, req, running_worker, start, wait_state, wait_until


class WorkerProcess:
    """``ringflow worker`` in a separate process, so it can really be SIGKILLed."""

    def __init__(self, address: str, task_queue: str, database_url: str) -> None:
        self.metrics_port = free_port()
        self.env = {
            **os.environ,
            "RINGFLOW_TEMPORAL_ADDRESS": address,
            "RINGFLOW_TASK_QUEUE": task_queue,
            "RINGFLOW_DATABASE_URL": database_url,
            "RINGFLOW_METRICS_PORT": str(self.metrics_port),
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ringflow.cli", "worker"],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            return resp.read().decode()


@pytest.fixture
def worker_process(temporal_server: DevStack, task_queue: str, sqlite_url: str) -> Iterator[WorkerProcess]:
    wp = WorkerProcess(temporal_server.address, task_queue, sqlite_url)
    wp.start()
    yield wp
    wp.stop()


async def test_worker_killed_mid_call_loses_nothing(
    temporal_client: Client, task_queue: str, worker_process: WorkerProcess
) -> None:
    call = await start(temporal_client, task_queue)
    agent = Agent(call)
    await agent.say(("user", "yes that's me"))
    await agent.transition("verify", "confirmed")
    await wait_state(call, lambda s: s.node == "offer", timeout=60, what="worker up, node offer")
    taken = await call.call_function(req("offer", "book", slot="Tue 10"))
    assert taken.decision == "transition"
    worker_process.kill()
    # While no worker runs, the agent keeps talking: signals are stored by the server.
    await agent.say(("user", "fine, Monday then"))
    worker_process.start()
    slots = await call.call_function(req("offer", "list_slots"))  # served by the new worker
    assert slots.result == {"slots": ["Mon 9"]}
    await agent.transition("offer", "wants_human")
    record = await wait_until(lambda: call.handle.result(), timeout=60, what="call result")
    assert record.path == ["verify", "offer", "offer", "handoff"]
    assert [t["text"] for t in record.transcript] == ["yes that's me", "fine, Monday then"]
    assert record.disposition == "callback"

    async def metrics_ready() -> str | None:
        try:
            text = worker_process.metrics()
        except OSError:
            return None
        return text if "ringflow_calls_ended" in text else None

    text = await wait_until(metrics_ready, timeout=20, what="ringflow metrics")
    assert "ringflow_calls_ended_total" in text and 'end_reason="completed"' in text
    assert "ringflow_function_runs_total{" in text and 'kind="handler"' in text
    assert "ringflow_function_duration_seconds_bucket" in text and "ringflow_signal_lag_seconds_count" in text


async def test_server_restarted_mid_call_keeps_state(
    temporal_server: DevStack, task_queue: str, sqlite_url: str
) -> None:
    from ringflow.temporal_setup import connect

    client = await connect(temporal_server.address)
    async with running_worker(client, task_queue, sqlite_url):
        call = await start(client, task_queue)
        agent = Agent(call)
        await agent.transition("verify", "confirmed")
        await wait_state(call, lambda s: s.node == "offer")
        temporal_server.stop()
        await temporal_server.start()
        client2 = await connect(temporal_server.address)
        from ringflow.workflows.client import CallHandle

        call2 = CallHandle(client2, call.call_id)
        st = await wait_state(call2, lambda s: s.node == "offer", timeout=60)
        assert st.path == ["verify", "offer"]
        agent.call = call2
        await agent.transition("offer", "wants_human")
        record = await wait_until(lambda: call2.handle.result(), timeout=60, what="result after restart")
    assert record.path == ["verify", "offer", "handoff"]


async def test_activity_failing_twice_then_succeeding(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with flaky_api(failures=2) as (url, keys), running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue, variables={"patient": "Alex Doe", "api_url": url})
        await Agent(call).transition("verify", "confirmed")
        await wait_state(call, lambda s: s.node == "offer")
        out = await call.call_function(req("offer", "lookup", key="A-1"))
        assert not out.error and out.result == {"file": "A-1", "attempt": 3}
        assert len(keys) == 3 and len(set(keys)) == 1 and keys[0].startswith(f"{call.call_id}:")
        await call.hangup()
        await call.handle.result()


async def test_long_call_continues_as_new_without_losing_anything(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue, max_history_events=60)
        agent = Agent(call)
        dup = agent.turns_event(("user", "turn 0"))
        await call.turns(dup)
        for i in range(1, 70):
            await agent.say(("user", f"turn {i}"), ("assistant", f"reply {i}"))
            if i % 10 == 0:
                await wait_state(call, lambda s, n=i: s.turns == 2 * n + 1, what=f"turn {i} applied")
        await call.turns(dup)  # a duplicate from the first run, after continue-as-new
        st = await wait_state(call, lambda s: s.turns == 139 and s.runs >= 3, timeout=60)
        await agent.transition("verify", "confirmed")
        await agent.transition("offer", "wants_human")
        record = await wait_until(lambda: call.handle.result(), timeout=60, what="result")
    assert st.duplicates >= 1
    assert record.path == ["verify", "offer", "handoff"]
    persisted = load_transcript(call.call_id, database_url=sqlite_url)
    carried = record.transcript
    texts = [t.text for t in persisted] + [
        t["text"] for t in carried if t["idx"] not in {p.idx for p in persisted}
    ]
    assert texts[0] == "turn 0" and texts.count("turn 0") == 1
    assert len(texts) == 139 and texts[-1] == "reply 69"
