"""Load bench (issue 13): how many live calls one dev server and one worker hold.

Starts one private dev server (``bench/_stack.py``, the ``DevStack`` that ``ringflow dev``
runs), one ``ringflow worker`` process, and one raw-baseline worker process
(``bench/_load_worker.py``), then ramps N concurrent calls. Each call carries the issue's
traffic: a heartbeat every 5 s, and every ~5 s a user turn, an assistant turn and, one time
in four, a transition. Ringflow's calls go through the agent's real ``Outbox`` and
``workflow_sender`` with the agent's settings (coalescing, ``agents/runner.py``); the
baseline sends every event as its own signal into a workflow that appends it to a list
(``LoadBaseline``), the raw-signal design. Each side ramps until its p99 passes 300 ms.
The two sides alternate step by step (Ringflow's N, then the raw design's N), and every
step waits first until the server has settled (``_load_measure.settle``): no call of the
step before still open, and the server and both workers back near idle, measured
(``RINGFLOW_LOAD_SETTLE_CPU_PCT`` of one core, default 10). Each step reports how long it
waited and the machine's speed probed just before it (``_report.cpu_probe``).

Lag is read from the histories: from an event's ``at`` (stamped when the agent queued it)
to the completion of the workflow task that applied it (the first task started after its
signal). ``state_lag`` is for state-changing events (transitions, line events, hang-ups),
``turn_lag`` for transcript turns (their linger included). Rates are counted in the
histories of a sample of calls inside the measured window and scaled to N. CPU is percent
of one core over the window (psutil), memory the RSS at its end. ``wrong_calls`` are calls
that did not end ``completed`` with every turn sent in their transcript.

``RINGFLOW_BENCH_SHORT=1`` (``make bench``) runs two small steps only; the full ramp runs
for many minutes: ``make bench-load``. ``RINGFLOW_LOAD_STEPS=100,200`` (and
``RINGFLOW_LOAD_RAW_STEPS`` for the raw side, when it should ramp differently) and
``RINGFLOW_LOAD_WINDOW_S`` choose the steps and the measured window. Ringflow's calls
journal their outbox in Redis (``RINGFLOW_REDIS_URL``) as an agent with Redis does;
``RINGFLOW_LOAD_JOURNAL=0`` runs them without. Payload encryption
is off here (histories are read in clear); the codec costs the client and worker, not the
server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ["RINGFLOW_ENCRYPTION"] = "0"
import psutil
from _actions import ActionCounter
from _gcwatch import scrape, window
from _load_calls import AGENT, PERIOD_S, STAGGER_S, RawCall, RingflowCall, drive
from _load_measure import Meter, read_histories, settle
from _report import claim_stdout, cpu_probe, emit, percentile
from _stack import ROOT, bench_stack
from temporalio.client import Client

from ringflow.agents.supervised import SUPERVISOR_BACKSTOP_S, SUPERVISOR_POLL_S
from ringflow.callflow.loader import load_flow
from ringflow.devstack import free_port
from ringflow.workflows.client import start_call

SHORT = os.environ.get("RINGFLOW_BENCH_SHORT") == "1" or "--short" in sys.argv
_STEPS = os.environ.get("RINGFLOW_LOAD_STEPS")  # e.g. "100,200,400": the ramp's N
STEPS = (
    [int(x) for x in _STEPS.split(",")]
    if _STEPS
    else [5, 10]
    if SHORT
    else [50, 100, 200, 300, 400, 600, 800, 1000, 1200, 1500]
)
_RAW_STEPS = os.environ.get("RINGFLOW_LOAD_RAW_STEPS")  # the raw side's ramp, if it differs
RAW_STEPS = [int(x) for x in _RAW_STEPS.split(",")] if _RAW_STEPS else STEPS
WINDOW_S = float(os.environ.get("RINGFLOW_LOAD_WINDOW_S", 10.0 if SHORT else 40.0))  # after the stagger
SAMPLE = 10 if SHORT else 200  # histories read per step and side (40 gave ~100 lags: p99 was the max)
TARGET_MS = 300.0
RESULT_WAITS = 400  # calls whose end is awaited at once (long polls; the server caps them)
# Settled before a step: every process under load below this (percent of one core) for 3 s
# in a row and no call open; a step starts anyway after SETTLE_TIMEOUT_S, and says so.
SETTLE_CPU_PCT = float(os.environ.get("RINGFLOW_LOAD_SETTLE_CPU_PCT", 10.0))
SETTLE_TIMEOUT_S = 300.0
# How long the node may trail the call in search attributes (workflows/visibility.py);
# unset: the call input's default.
_REFRESH = os.environ.get("RINGFLOW_LOAD_VISIBILITY_REFRESH_S")
VISIBILITY = {"visibility_refresh_s": float(_REFRESH)} if _REFRESH else {}
# The worker as deployed (infra/k8s/base/config.yaml): without the sandbox, unless said.
os.environ.setdefault("RINGFLOW_WORKER_SANDBOX", "false")
TUNING = {k: v for k, v in os.environ.items() if k.startswith("RINGFLOW_WORKER_")}
# The outbox journal (agents/journal.py) as an agent with Redis runs it; RINGFLOW_LOAD_JOURNAL=0
# measures the outbox without it (turns then linger 2 s at most).
JOURNAL = os.environ.get("RINGFLOW_LOAD_JOURNAL", "1") == "1"
WORKER_METRICS: list[str] = []  # the Ringflow worker's Prometheus endpoint, once started
REDIS_URL = os.environ.get("RINGFLOW_REDIS_URL", "redis://127.0.0.1:6379/0")
JOURNAL_REDIS: list[Any] = []  # the one client, made on the running loop
FLOW = Path("bench/flows/bench.yaml")


def _handle(c: RingflowCall | RawCall) -> Any:
    return c.handle if isinstance(c, RawCall) else c.call.handle


async def step(client: Client, n: int, raw: bool, tq: str, meters: dict[str, Meter]) -> dict[str, Any]:
    rng = random.Random(n * 2 + raw)
    flow = load_flow(FLOW)

    async def open_one(i: int) -> RingflowCall | RawCall:
        if raw:
            handle = await client.start_workflow(
                "LoadBaseline", id=f"raw-{n}-{i}-{uuid.uuid4().hex[:6]}", task_queue=tq
            )
            return RawCall(handle)
        call = await start_call(
            client,
            flow,
            task_queue=tq,
            call_id=f"load-{n}-{i}-{uuid.uuid4().hex[:6]}",
            agent_timeout_s=AGENT.call_agent_timeout_s,
            **VISIBILITY,
        )
        await call.attach("bench-agent")
        rc = RingflowCall(call, JOURNAL_REDIS[0] if JOURNAL_REDIS else None)
        rc.outbox.start()
        return rc

    # A real agent heartbeats from the moment it attaches. Opening 600 calls takes longer than
    # a call's agent timeout, so without this the first calls opened were ended as lost
    # before the traffic began (they were counted as calls that ended wrongly).
    ready = asyncio.Event()

    async def keepalive(c: RingflowCall | RawCall) -> None:
        while not ready.is_set():
            c.heartbeat()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ready.wait(), PERIOD_S)

    calls: list[RingflowCall | RawCall] = []
    keepalives: list[asyncio.Task[None]] = []
    for i in range(0, n, 50):  # start in slices: a burst of 1,000 starts is not the test
        opened = await asyncio.gather(*(open_one(j) for j in range(i, min(n, i + 50))))
        keepalives += [asyncio.create_task(keepalive(c)) for c in opened]
        calls += opened
    ready.set()
    await asyncio.gather(*keepalives)
    loop = asyncio.get_running_loop()
    stop_at = loop.time() + STAGGER_S + WINDOW_S
    drivers = [loop.create_task(drive(c, stop_at, rng)) for c in calls]
    await asyncio.sleep(STAGGER_S)
    gc_url = None if raw else WORKER_METRICS[0] if WORKER_METRICS else None
    gc0 = await asyncio.to_thread(scrape, gc_url) if gc_url else {}
    t0 = time.time()
    for m in meters.values():
        m.start()
    await asyncio.sleep(WINDOW_S)
    t1 = time.time()  # the window counted in histories; the drivers' last sends fall after it
    usage = {name: m.stop() for name, m in meters.items()}
    gc_pauses = window(gc0, await asyncio.to_thread(scrape, gc_url)) if gc_url else {}
    await asyncio.gather(*drivers)
    # Every call hangs up at once, but its result is awaited by at most RESULT_WAITS at a
    # time: each wait is a long poll, and the server refuses long polls past a namespace
    # limit (1,250 of them failed 46 calls with "namespace concurrent poller limit exceeded").
    waits = asyncio.Semaphore(RESULT_WAITS)
    ok = await asyncio.gather(*(c.finish(waits) for c in calls), return_exceptions=True)
    # a call whose end raised may still be open: end it, or the next step never settles
    raised = [_handle(c) for c, x in zip(calls, ok, strict=True) if isinstance(x, BaseException)]
    await asyncio.gather(*(h.terminate("bench step over") for h in raised), return_exceptions=True)
    why: dict[str, int] = {}  # what went wrong, by kind (an exception by its type)
    for x in ok:
        if x is not None:
            kind = x if isinstance(x, str) else f"raised_{type(x).__name__}"
            why[kind] = why.get(kind, 0) + 1
    wrong = sum(why.values())
    sample = calls[:: max(1, len(calls) // SAMPLE)][:SAMPLE]
    handles = [_handle(c) for c in sample]
    h = await read_histories(handles, t0, t1)
    scale, span = n / len(sample), t1 - t0
    lags = h["state"] + ([] if not raw else h["turns"])  # the raw design: every signal the same
    return {
        "n": n,
        "wrong": wrong,
        "wrong_by_kind": why,
        "window_s": round(span, 1),
        "p50": round(percentile(lags, 50), 1) if lags else None,
        "p99": round(percentile(lags, 99), 1) if lags else None,
        "state_phase_ms": {  # where a state event's lag went (read_histories)
            name: {"p50": round(percentile(v, 50), 1), "p99": round(percentile(v, 99), 1)}
            for name, v in h["phases"].items()
            if v
        },
        "turn_p50": round(percentile(h["turns"], 50), 1) if h["turns"] else None,
        "turn_p99": round(percentile(h["turns"], 99), 1) if h["turns"] else None,
        "signals_per_s": round(h["signals"] * scale / span, 1),
        "wft_per_s": round(h["wfts"] * scale / span, 1),
        "events_per_call_min": round(h["events"] / len(sample) / (span / 60), 1),
        "billable_per_call_min": billable(h["billed"], span),
        "events_per_call_min_by_type": {  # what the history is made of
            k: round(v / len(sample) / (span / 60), 2)
            for k, v in sorted(h["kinds"].items(), key=lambda kv: -kv[1])
        },
        "load_avg_1m": round(os.getloadavg()[0], 2),  # the machine is shared: say how busy it was
        **gc_pauses,  # the worker's full collections in the window (workflows/heap.py)
        **{f"{name}_cpu_pct": u[0] for name, u in usage.items()},
        **{f"{name}_rss_mb": u[1] for name, u in usage.items()},
    }


def billable(calls: list[ActionCounter], span: float) -> dict[str, Any]:
    """Temporal Cloud's billable actions per call-minute (``_actions.py``): across the sampled
    calls, and by type."""
    minutes = span / 60
    rates = [c.total / minutes for c in calls]
    kinds = sorted({k for c in calls for k in c.by_type})
    return {
        "p50": round(percentile(rates, 50), 1) if rates else None,
        "p99": round(percentile(rates, 99), 1) if rates else None,
        "by_type": {
            k: round(sum(c.by_type.get(k, 0) for c in calls) / len(calls) / minutes, 2) for k in kinds
        }
        if calls
        else {},
    }


def actions_metric(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """``billable_actions_per_call_minute`` at the first step both sides ran, beside the raw
    design's. Queries leave no history: the production agent's supervision reads (with Redis
    one each ``SUPERVISOR_BACKSTOP_S`` and one per supervisor action; without, one each
    ``SUPERVISOR_POLL_S``) are given beside the measured figure, not in it."""
    pair = step_pair(ours, theirs)
    if pair is None:
        return None
    r, b = pair
    a, base = r["billable_per_call_min"], b["billable_per_call_min"]
    polls = round(60 / SUPERVISOR_BACKSTOP_S, 1)  # as deployed: the agent has Redis
    return {
        "name": "billable_actions_per_call_minute",
        "unit": "actions",
        "p50": a["p50"],
        "p99": a["p99"],
        "baseline_p50": base["p50"],
        "baseline_p99": base["p99"],
        "ratio": round(a["p50"] / base["p50"], 2) if a["p50"] and base["p50"] else None,
        "at_calls": r["n"],
        "baseline_at_calls": b["n"],
        "by_type": a["by_type"],
        "baseline_by_type": base["by_type"],
        "agent_queries_per_call_minute": polls,
        "agent_queries_per_call_minute_without_redis": round(60 / SUPERVISOR_POLL_S, 1),
        "p50_with_agent_queries": round(a["p50"] + polls, 1) if a["p50"] is not None else None,
        "not_counted": "queries (this bench's calls send none), rejected updates, activity heartbeats",
        "source": "Temporal Cloud's published list of billable actions (bench/_actions.py)",
    }


def step_pair(
    ours: list[dict[str, Any]], theirs: list[dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The steps whose per-call figures go side by side: the first N both sides ran, else
    (the ramps differ, as they must for a ratio past 5) each side's first step. A call-minute's
    events and actions depend on what a call sends, not on how many calls share the server."""
    raw_at = {r["n"]: r for r in theirs}
    both = [r for r in ours if r["n"] in raw_at]
    if both:
        return both[0], raw_at[both[0]["n"]]
    return (ours[0], theirs[0]) if ours and theirs else None


def events_metric(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """``history_events_per_call_minute``, by event type, beside the raw design's."""
    pair = step_pair(ours, theirs)
    if pair is None:
        return None
    r, b = pair
    return {
        "name": "history_events_per_call_minute",
        "unit": "events",
        "p50": r["events_per_call_min"],
        "p99": None,
        "baseline_p50": b["events_per_call_min"],
        "ratio": round(r["events_per_call_min"] / b["events_per_call_min"], 3)
        if r["events_per_call_min"] and b["events_per_call_min"]
        else None,
        "at_calls": r["n"],
        "baseline_at_calls": b["n"],
        "by_type": r["events_per_call_min_by_type"],
        "baseline_by_type": b["events_per_call_min_by_type"],
    }


class Side:
    """One side of the comparison: its steps, task queue, meters and results so far."""

    def __init__(self, name: str, steps: list[int], tq: str, meters: dict[str, Meter]) -> None:
        self.name, self.steps, self.tq, self.meters = name, steps, tq, meters
        self.results: list[dict[str, Any]] = []
        self.done = False


async def ramps(client: Client, sides: list[Side], pids: dict[str, int]) -> None:
    """Both ramps, alternating step by step, each step after the server settled; a side
    stops at its first step past the target (or with a call ended wrongly)."""
    for i in range(max(len(side.steps) for side in sides)):
        for side in sides:
            if side.done or i >= len(side.steps):
                continue
            quiet = await settle(client, [s.tq for s in sides], pids, SETTLE_CPU_PCT, SETTLE_TIMEOUT_S)
            speed = cpu_probe()  # in this process, while the server is quiet
            res = await step(client, side.steps[i], side.name == "raw", side.tq, side.meters)
            res.update(settle=quiet, **speed)
            print(json.dumps({"side": side.name, **res}), file=sys.stderr, flush=True)
            side.results.append(res)
            if res["p99"] is None or res["p99"] > TARGET_MS or res["wrong"]:
                side.done = True


def held(results: list[dict[str, Any]]) -> int:
    """The most calls held at the target: p99 under it and no call ending wrongly."""
    good = [r["n"] for r in results if r["p99"] is not None and r["p99"] <= TARGET_MS and not r["wrong"]]
    return max(good, default=0)


async def run() -> list[dict[str, Any]]:
    async with bench_stack() as bs:
        tq = f"load-{uuid.uuid4().hex[:8]}"
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "RINGFLOW_TEMPORAL_ADDRESS": bs.stack.address,
            "RINGFLOW_TEMPORAL_NAMESPACE": bs.stack.namespace,
            "RINGFLOW_TASK_QUEUE": tq,
            "RINGFLOW_DATABASE_URL": bs.database_url,
            "RINGFLOW_METRICS_PORT": str(metrics_port := free_port()),
            "RINGFLOW_ENCRYPTION": "0",
            "RINGFLOW_LOG_LEVEL": "WARNING",
        }
        WORKER_METRICS[:] = [f"http://127.0.0.1:{metrics_port}/metrics"]
        ringflow = [sys.executable, "-m", "ringflow.cli", "worker"]
        # the children's output goes to stderr: stdout carries the one JSON document
        worker = subprocess.Popen(ringflow, cwd=ROOT, env=env, stdout=sys.stderr)
        baseline = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "bench" / "_load_worker.py"),
                bs.stack.address,
                bs.stack.namespace,
                f"{tq}-raw",
            ],
            cwd=ROOT,
            env=env,
            stdout=sys.stderr,
        )
        try:
            server = Meter(bs.stack._proc.pid)  # type: ignore[union-attr]
            me = Meter(os.getpid())
            meters = {"server": server, "worker": Meter(worker.pid), "driver": me}
            if JOURNAL:
                from redis.asyncio import BlockingConnectionPool, Redis

                # one client for every call here (an agent process has its own): a bounded
                # pool that waits for a free connection, not one per concurrent write
                pool = BlockingConnectionPool.from_url(
                    REDIS_URL, max_connections=64, timeout=10, socket_timeout=5
                )
                redis = Redis(connection_pool=pool)
                try:
                    await redis.ping()
                    JOURNAL_REDIS.append(redis)
                except Exception as exc:  # measured, and said, without the journal
                    print(
                        f"no Redis at {REDIS_URL} ({exc!r}): calls run without the journal", file=sys.stderr
                    )
                redis_pids = [
                    p.pid for p in psutil.process_iter(["name"]) if p.info["name"] == "redis-server"
                ]
                if redis_pids:
                    meters["redis"] = Meter(redis_pids[0])
            raw_meters = {"server": server, "worker": Meter(baseline.pid), "driver": me}
            sides = [Side("ringflow", STEPS, tq, meters), Side("raw", RAW_STEPS, f"{tq}-raw", raw_meters)]
            pids = {"server": server.proc.pid, "worker": worker.pid, "raw_worker": baseline.pid}
            await ramps(bs.client, sides, pids)
            ours, theirs = sides[0].results, sides[1].results
        finally:
            for proc in (worker, baseline):
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    value, base = held(ours), held(theirs)
    metrics: list[dict[str, Any]] = [
        {
            "name": "live_calls",
            "unit": "calls",
            "value": value,
            "baseline": base,
            "ratio": round(value / base, 2) if base else None,
            "target_p99_ms": TARGET_MS,
            "short": SHORT,
            "max_n_tried": max((r["n"] for r in ours), default=0),
            "steps": [
                {"side": side, "n": r["n"], "p50": r["p50"], "p99": r["p99"], "wrong": r["wrong"]}
                for side, results in (("ringflow", ours), ("raw", theirs))
                for r in results
            ],
            "heartbeat_s": AGENT.heartbeat_s,
            "journal": bool(JOURNAL_REDIS),
            "worker_tuning": TUNING or "SDK defaults",
            "order": "alternating, each step after the server settled",
            "settle_cpu_pct": SETTLE_CPU_PCT,
        }
    ]
    if (billed := actions_metric(ours, theirs)) is not None:
        metrics.append(billed)
    if (events := events_metric(ours, theirs)) is not None:
        metrics.append(events)
    raw_at = {r["n"]: r for r in theirs}
    for r in ours:
        b = raw_at.get(r["n"], {})
        metrics.append(
            {
                "name": f"state_lag@{r['n']}",
                "unit": "ms",
                "p50": r["p50"],
                "p99": r["p99"],
                "baseline_p50": b.get("p50"),
                "baseline_p99": b.get("p99"),
                "ratio": round(r["p50"] / b["p50"], 3) if r["p50"] and b.get("p50") else None,
                "detail": r,
                "baseline_detail": b or None,
            }
        )
    return metrics


def main() -> None:
    os.chdir(ROOT)
    claim_stdout()  # 1,250 calls' result polls once put the core's retry warnings there
    emit("load", asyncio.run(run()))


if __name__ == "__main__":
    main()
