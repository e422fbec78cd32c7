"""Dead air when a worker pod goes away: the next update of its live calls, after SIGTERM.

Two real ``ringflow worker`` processes; worker A serves some live calls (they sit in its
sticky cache), worker B is up. Then A is stopped and each call's next ``call_function``
update is timed until it completes on B:

* ``next_update_after_sigterm``: A gets SIGTERM and shuts down gracefully (today's worker);
* ``next_update_after_sigkill``: A dies at once, as a worker did on SIGTERM before the
  graceful shutdown (the server waits out the sticky schedule-to-start timeout, ~10 s).

The baseline of both is the same update on a call whose worker is alive.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

from _stack import bench_stack

from ringflow.codec import generate_key
from ringflow.devstack import free_port
from ringflow.workflows.client import CallHandle, start_call
from tests.support.wfkit import Agent, clinic, req

CALLS = 5


def spawn(address: str, task_queue: str, database_url: str, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    health = free_port()
    env = {
        **os.environ,
        "RINGFLOW_TEMPORAL_ADDRESS": address,
        "RINGFLOW_TASK_QUEUE": task_queue,
        "RINGFLOW_DATABASE_URL": database_url,
        "RINGFLOW_METRICS_PORT": str(free_port()),
        "RINGFLOW_HEALTH_PORT": str(health),
        "RINGFLOW_GRACEFUL_SHUTDOWN_S": "5",
        "RINGFLOW_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
    }
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ringflow.cli", "worker"], env=env, stdout=subprocess.DEVNULL, stderr=out
        )
    return proc, health


async def ready(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError(f"worker on health port {port} never became ready")


async def live_calls(client, task_queue: str) -> list[CallHandle]:  # type: ignore[no-untyped-def]
    calls = []
    for _ in range(CALLS):
        call = await start_call(
            client, clinic(), task_queue=task_queue, variables={"patient": "Alex Doe"}, agent_timeout_s=3600
        )
        agent = Agent(call)
        await agent.say(("user", "yes that's me"))
        await agent.transition("verify", "confirmed")
        await call.call_function(req("offer", "list_slots"))  # served: the call is in A's cache
        calls.append(call)
    return calls


async def timed_updates(calls: list[CallHandle]) -> list[int]:
    async def one(call: CallHandle) -> int:
        t0 = time.perf_counter_ns()
        await call.call_function(req("offer", "list_slots"))
        return time.perf_counter_ns() - t0

    return list(await asyncio.gather(*(one(c) for c in calls)))


async def round_(bs, stop: signal.Signals, log: Path) -> tuple[list[int], list[int]]:  # type: ignore[no-untyped-def]
    task_queue = f"bench-shutdown-{uuid.uuid4().hex[:8]}"
    a, a_health = spawn(bs.stack.address, task_queue, bs.database_url, log)
    b = None
    try:
        await ready(a_health)
        calls = await live_calls(bs.client, task_queue)
        steady = await timed_updates(calls)
        b, b_health = spawn(bs.stack.address, task_queue, bs.database_url, log)
        await ready(b_health)
        a.send_signal(stop)
        await asyncio.to_thread(a.wait, 60)
        after = await timed_updates(calls)
        for call in calls:
            await call.hangup()
        return after, steady
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)


async def main() -> None:
    from _report import emit, metric

    os.environ.setdefault("RINGFLOW_CODEC_KEYS", f"bench:{generate_key()}")
    async with bench_stack() as bs:
        log = bs.tmp / "workers.log"
        term, steady_1 = await round_(bs, signal.SIGTERM, log)
        kill, steady_2 = await round_(bs, signal.SIGKILL, log)
    steady = steady_1 + steady_2
    emit(
        "worker_shutdown",
        [
            metric("next_update_after_sigterm", term, steady, unit="ms"),
            metric("next_update_after_sigkill", kill, steady, unit="ms"),
        ],
    )


if __name__ == "__main__":
    asyncio.run(main())
