"""What the load bench reads (imported by bench/load.py; not a bench): lags and counts
from the calls' histories, the CPU and memory of the processes under load, and whether
the server has settled before a step.

Lag runs from an event's ``at`` (stamped when the agent queued it) to the completion of the
workflow task that applied it (the first task started after its signal).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import psutil
from _actions import ActionCounter
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

STATE_KINDS = {"transition", "event", "hangup"}  # state-changing events; the rest are turns


def _ts(event: Any) -> float:
    return event.event_time.seconds + event.event_time.nanos / 1e9


def _kind(event: Any) -> str:
    return EventType.Name(event.event_type).removeprefix("EVENT_TYPE_").lower()


def _sent(event: Any) -> list[tuple[str, float]]:
    """(type, at) of each agent event a signal carried (a batch, or one raw event)."""
    attrs = event.workflow_execution_signaled_event_attributes
    body = json.loads(attrs.input.payloads[0].data) if attrs.input.payloads else {}
    items = body.get("events", [body]) if isinstance(body, dict) else []
    return [
        (str(i.get("type")), float(i["at"]))
        for i in items
        if isinstance(i, dict) and isinstance(i.get("at"), (int, float))
    ]


async def timeline(handle: WorkflowHandle[Any, Any]) -> str:
    """A call's history, one line per event, times from its start: what a wrong end needs."""
    lines: list[str] = []
    t0: float | None = None
    async for ev in handle.fetch_history_events():
        at = _ts(ev)
        t0 = at if t0 is None else t0
        note = ""
        if ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            note = " ".join(f"{kind}@{sent - t0:.1f}" for kind, sent in _sent(ev))
        elif ev.event_type == EventType.EVENT_TYPE_TIMER_STARTED:
            fire = ev.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
            note = f"{fire.total_seconds():.1f} s"
        lines.append(f"  {at - t0:7.2f} {_kind(ev)} {note}")
    return "\n".join(lines)


async def read_histories(handles: list[WorkflowHandle[Any, Any]], t0: float, t1: float) -> dict[str, Any]:
    """Lags and counts inside [t0, t1) from the histories of ``handles``. A state event's
    lag is split where its time went: the agent to the server (its signal's event time),
    waiting for a worker (the workflow task's start) and the task itself."""
    state: list[float] = []
    turns: list[float] = []
    phases: dict[str, list[float]] = {"to_server": [], "queued": [], "ran": []}
    signals = wfts = events = 0
    kinds: dict[str, int] = {}
    billed: list[ActionCounter] = []  # each call's billable actions in the window (_actions.py)
    for handle in handles:
        actions = ActionCounter()
        billed.append(actions)
        started: list[tuple[str, float, float]] = []  # (kind, sent, signaled)
        pending: list[tuple[str, float, float]] = []
        task_started = 0.0
        async for ev in handle.fetch_history_events():
            at = _ts(ev)
            inside = t0 <= at < t1
            actions.feed(ev, inside)
            events += inside
            if inside:
                kinds[_kind(ev)] = kinds.get(_kind(ev), 0) + 1
            if ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
                signals += inside
                pending += [(kind, sent, at) for kind, sent in _sent(ev)]
            elif ev.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                started, pending, task_started = started + pending, [], at
            elif ev.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                wfts += inside
                for kind, sent, signaled in started:
                    if t0 <= sent < t1:
                        lag = (at - sent) * 1000
                        if kind in STATE_KINDS:
                            state.append(lag)
                            phases["to_server"].append((signaled - sent) * 1000)
                            phases["queued"].append((task_started - signaled) * 1000)
                            phases["ran"].append((at - task_started) * 1000)
                        elif kind == "turns":
                            turns.append(lag)
                started = []
    return {
        "state": state,
        "turns": turns,
        "phases": phases,
        "signals": signals,
        "wfts": wfts,
        "events": events,
        "kinds": kinds,
        "billed": billed,
    }


class Meter:
    """CPU (percent of one core) and RSS of a process over a window."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self.t0 = 0.0
        self.c0 = 0.0

    def _cpu(self) -> float:
        times = self.proc.cpu_times()
        return times.user + times.system + times.children_user + times.children_system

    def start(self) -> None:
        self.t0, self.c0 = time.monotonic(), self._cpu()

    def stop(self) -> tuple[float, float]:
        cpu = (self._cpu() - self.c0) / max(1e-9, time.monotonic() - self.t0) * 100
        return round(cpu, 1), round(self.proc.memory_info().rss / 2**20, 1)


async def settle(
    client: Client,
    queues: list[str],
    pids: dict[str, int],
    cpu_pct: float,
    timeout_s: float,
    sample_s: float = 1.0,
    quiet_samples: int = 3,
) -> dict[str, Any]:
    """Wait until the previous step has drained, measured, not slept: no workflow open on
    the bench's task queues (as the server's visibility sees it) and every process in
    ``pids`` under ``cpu_pct`` of one core, for ``quiet_samples`` samples in a row.

    Without it a step measured the server still working off the step before: the raw
    design's first step, run right after Ringflow's heaviest, gave a p99 of seconds.
    Gives up after ``timeout_s`` and says so (``settled`` false), with what it last saw.
    """
    start = time.monotonic()
    query = f'ExecutionStatus="Running" AND ({" OR ".join(f"TaskQueue={q!r}" for q in queues)})'
    quiet = 0
    while True:
        meters = {name: Meter(pid) for name, pid in pids.items()}
        for m in meters.values():
            m.start()
        await asyncio.sleep(sample_s)
        cpu = {name: m.stop()[0] for name, m in meters.items()}
        still_open = (await client.count_workflows(query)).count
        quiet = quiet + 1 if still_open == 0 and max(cpu.values()) <= cpu_pct else 0
        waited = time.monotonic() - start
        if quiet >= quiet_samples or waited >= timeout_s:
            return {
                "settled": quiet >= quiet_samples,
                "waited_s": round(waited, 1),
                "open_workflows": still_open,
                **{f"{name}_cpu_pct": c for name, c in cpu.items()},
            }
