"""Workflow bench: what a call costs in Temporal, next to a bare workflow doing the same.

Prints one JSON document (``_report.emit``). One private dev server (free ports, temp
dir, ``bench/_stack.py``) and one worker process serve both CallWorkflow
(``workflows.worker.build_worker``) and a minimal raw workflow (``bench/_baseline.py``);
samples of the two are interleaved so drift on the machine hits both alike.
``ratio`` = p50 / baseline_p50 is what Ringflow adds.

Metrics (milliseconds unless said otherwise):

* ``signal_applied``: a ``transition`` signal sent until the workflow has applied it.
  "Applied" is observed by polling a query back to back (``call_state`` for the call,
  ``applied`` for the baseline's counter signal) until it shows the new transition
  count. The server answers a query only once the workflow task that applied the
  signal has completed, so this is "durably applied"; the poll's resolution is one
  query round trip, the same for both sides.
* ``call_function``: the ``call_function`` update round trip with a no-op handler
  (``bench/flows``); the baseline is an update running one no-op local activity, the
  same durable work. ``call_function_vs_echo_update`` compares it with a bare echo update,
  for the cost of running a handler at all.
* ``events_per_turn`` (events): history events added by one ``events`` signal holding a
  TurnsEvent and a TransitionEvent, counted with ``fetch_history`` before and after;
  the baseline is one counter signal.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _baseline import BenchBaseline, bench_noop
from _report import emit, percentile
from _stack import ROOT, bench_stack
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from ringflow.activities.persistence import dispose_engines
from ringflow.callflow.loader import load_flow
from ringflow.contract.events import EventBatch, TransitionEvent, Turn, TurnsEvent
from ringflow.contract.updates import CallFunctionRequest
from ringflow.settings import Settings
from ringflow.workflows.client import CallHandle, start_call
from ringflow.workflows.worker import build_worker

FLOW = Path("bench/flows/bench.yaml")  # relative to ROOT, where the worker runs handlers from
ITERATIONS = 200
WARMUP = 15
TURNS = 30


def metric(name: str, unit: str, samples: list[float], baseline: list[float]) -> dict[str, Any]:
    """Like ``_report.metric`` but for ms and event counts, and ``ratio`` to 3 decimals:
    the targets (1.3) sit where rounding to one decimal would hide a miss."""
    p50, base = percentile(samples, 50), percentile(baseline, 50)
    return {
        "name": name,
        "unit": unit,
        "p50": round(p50, 3),
        "p99": round(percentile(samples, 99), 3),
        "baseline_p50": round(base, 3),
        "ratio": round(p50 / base, 3) if base else None,
        "n": len(samples),
    }


async def poll(check: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    """Query back to back until ``check`` holds: the detection both sides share."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError("the workflow did not apply the signal in time")


async def timed(fn: Callable[[], Awaitable[Any]]) -> float:
    t0 = time.perf_counter()
    await fn()
    return (time.perf_counter() - t0) * 1000


async def history_length(handle: WorkflowHandle[Any, Any]) -> int:
    return len((await handle.fetch_history()).events)


class BenchCall:
    """One CallWorkflow on the bench flow, driven as the agent drives it."""

    def __init__(self, call: CallHandle) -> None:
        self.call = call
        self.seq = 0
        self.transitions = 0
        self.node = "ping"

    def transition_event(self) -> TransitionEvent:
        self.seq += 1
        ev = TransitionEvent(
            event_id=f"t-{uuid.uuid4().hex[:10]}",
            seq=self.seq,
            from_node=self.node,
            name="flip",
            at=time.time(),
        )
        self.node = "pong" if self.node == "ping" else "ping"
        self.transitions += 1
        return ev

    def turns_event(self) -> TurnsEvent:
        self.seq += 1
        return TurnsEvent(
            event_id=f"u-{uuid.uuid4().hex[:10]}",
            seq=self.seq,
            at=time.time(),
            items=[
                Turn(role="assistant", text="Would Tuesday at ten suit you?"),
                Turn(role="user", text="Yes, Tuesday works for me."),
            ],
        )

    async def applied(self) -> None:
        want = self.transitions
        await poll(lambda: self._has(want))

    async def _has(self, want: int) -> bool:
        state = await self.call.handle.query("call_state")
        return int(state["transitions"]) >= want

    async def signal(self) -> None:
        await self.call.transition(self.transition_event())
        await self.applied()

    async def call_function(self) -> None:
        req = CallFunctionRequest(event_id=f"f-{uuid.uuid4().hex[:10]}", node=self.node, name="noop")
        out = await self.call.call_function(req)
        if out.error or out.decision != "stay":
            raise RuntimeError(f"noop failed: {out}")

    async def turn(self) -> None:
        await self.call.batch(EventBatch(events=[self.turns_event(), self.transition_event()]))
        await self.applied()

    async def finish(self) -> None:
        self.seq += 1
        await self.call.transition(
            TransitionEvent(event_id=f"end-{self.seq}", seq=self.seq, from_node=self.node, name="finish")
        )
        await self.call.handle.result()


class Baseline:
    def __init__(self, handle: WorkflowHandle[Any, Any]) -> None:
        self.handle = handle
        self.count = 0

    async def signal(self) -> None:
        self.count += 1
        want = self.count
        await self.handle.signal(BenchBaseline.bump, {"seq": want})
        await poll(lambda: self._has(want))

    async def _has(self, want: int) -> bool:
        return int(await self.handle.query(BenchBaseline.applied)) >= want

    async def call(self) -> None:
        await self.handle.execute_update(BenchBaseline.call, {"name": "noop"})

    async def echo(self) -> None:
        await self.handle.execute_update(BenchBaseline.echo, {"name": "noop"})

    async def finish(self) -> None:
        await self.handle.signal(BenchBaseline.stop)
        await self.handle.result()


async def new_call(client: Client, task_queue: str) -> BenchCall:
    call = await start_call(
        client,
        load_flow(FLOW),
        task_queue=task_queue,
        call_id=f"bench-{uuid.uuid4().hex[:10]}",
        agent_timeout_s=3600,
        max_history_events=50_000,
    )
    return BenchCall(call)


async def new_baseline(client: Client, task_queue: str) -> Baseline:
    handle = await client.start_workflow(
        BenchBaseline.run, id=f"base-{uuid.uuid4().hex[:10]}", task_queue=task_queue
    )
    return Baseline(handle)


async def paired(
    ours: Callable[[], Awaitable[Any]], theirs: Callable[[], Awaitable[Any]], n: int
) -> tuple[list[float], list[float]]:
    """Alternate the two, so a slow patch of the machine lands on both."""
    a: list[float] = []
    b: list[float] = []
    for i in range(WARMUP + n):
        if i % 2:
            x = await timed(ours)
            y = await timed(theirs)
        else:
            y = await timed(theirs)
            x = await timed(ours)
        if i >= WARMUP:
            a.append(x)
            b.append(y)
    return a, b


async def events_per_turn(call: BenchCall, base: Baseline, n: int) -> tuple[list[float], list[float]]:
    ours: list[float] = []
    theirs: list[float] = []
    await call.turn()  # unmeasured: the first would also count the workflow's first task
    await base.signal()
    for _ in range(n):
        before = await history_length(call.call.handle)
        await call.turn()
        ours.append(await history_length(call.call.handle) - before)
        before = await history_length(base.handle)
        await base.signal()
        theirs.append(await history_length(base.handle) - before)
    return ours, theirs


async def run() -> list[dict[str, Any]]:
    async with bench_stack() as bs:
        client = bs.client
        tq = f"bench-{uuid.uuid4().hex[:8]}"
        settings = Settings(database_url=bs.database_url)
        # A second Worker in this process (build_worker takes only CallWorkflow), on the same
        # client and core runtime, so both sides share the process, connection and event loop.
        base_worker = Worker(
            client, task_queue=f"{tq}-base", workflows=[BenchBaseline], activities=[bench_noop]
        )
        async with build_worker(client, settings, task_queue=tq), base_worker:
            call, base = await new_call(client, tq), await new_baseline(client, f"{tq}-base")
            sig, sig_base = await paired(call.signal, base.signal, ITERATIONS)
            fn, fn_base = await paired(call.call_function, base.call, ITERATIONS)
            fn2, echo = await paired(call.call_function, base.echo, ITERATIONS // 2)
            await call.finish()
            turn_call, turn_base = await new_call(client, tq), await new_baseline(client, f"{tq}-base")
            ev, ev_base = await events_per_turn(turn_call, turn_base, TURNS)
            await turn_call.finish()
            await base.finish()
            await turn_base.finish()
        dispose_engines()
    return [
        metric("signal_applied", "ms", sig, sig_base),
        metric("call_function", "ms", fn, fn_base),
        metric("call_function_vs_echo_update", "ms", fn2, echo),
        metric("events_per_turn", "events", ev, ev_base),
    ]


def main() -> None:
    os.chdir(ROOT)  # the flow's source path, and so its handler module, is relative to the repo
    emit("workflow", asyncio.run(run()))


if __name__ == "__main__":
    main()
