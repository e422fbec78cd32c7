"""The agent's Prometheus metrics: what an on-call engineer needs to see of the realtime side.

Served by livekit-agents' own metrics server (``AgentServer(prometheus_port=...)``, set by
``ringflow agent`` from ``RINGFLOW_AGENT_METRICS_PORT``), which collects from every job
process through prometheus_client's multiprocess mode; so gauges say how they combine
across processes and are set explicitly (no callbacks, which that mode cannot collect).

* ``ringflow_agent_calls_active``: calls this agent serves right now.
* ``ringflow_agent_transitions_total`` and ``ringflow_agent_transition_seconds``: node
  transitions the LLM made, and what applying one locally costs the caller (the engine
  step, the new node in the live session, the event queued; never a Temporal round trip).
* ``ringflow_agent_outbox_pending_events`` and ``ringflow_agent_outbox_oldest_pending_seconds``:
  events not yet acknowledged by the workflow, and how long the oldest has waited.
* ``ringflow_agent_attach_seconds``: attach (a new call) or resume (after a crash) to
  serving, labelled ``resumed``.
* ``ringflow_agent_signals_failed_total``: failed sends of events to the workflow.
* ``ringflow_agent_events_dropped_total``: events too large for any signal, dropped (a note
  with their id and seq goes instead, so the events behind them go on).
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Protocol

from prometheus_client import Counter, Gauge, Histogram

from ringflow.agents.outbox import Outbox

REFRESH_S = 1.0
FAST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)

CALLS_ACTIVE = Gauge(
    "ringflow_agent_calls_active", "Calls the agent serves now.", multiprocess_mode="livesum"
)
TRANSITIONS = Counter("ringflow_agent_transitions", "Node transitions made by the agent's LLM.", ["flow"])
TRANSITION_SECONDS = Histogram(
    "ringflow_agent_transition_seconds",
    "Local cost of applying a transition on the agent (no Temporal round trip).",
    ["flow"],
    buckets=FAST_BUCKETS,
)
OUTBOX_PENDING = Gauge(
    "ringflow_agent_outbox_pending_events",
    "Agent events not yet acknowledged by the workflow.",
    multiprocess_mode="livesum",
)
OUTBOX_OLDEST = Gauge(
    "ringflow_agent_outbox_oldest_pending_seconds",
    "Age of the oldest agent event not yet acknowledged by the workflow.",
    multiprocess_mode="max",
)
ATTACH_SECONDS = Histogram(
    "ringflow_agent_attach_seconds",
    "Attach (resumed=false) or resume to serving.",
    ["resumed"],
    buckets=(0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
SIGNALS_FAILED = Counter("ringflow_agent_signals_failed", "Failed sends of agent events to the workflow.")
EVENTS_DROPPED = Counter(
    "ringflow_agent_events_dropped",
    "Agent events too large for any signal, replaced by a note (agents/signals.py).",
    ["type"],
)


class ServedCall(Protocol):
    """What the gauges read of a call's controller."""

    @property
    def dead(self) -> bool: ...
    @property
    def ended(self) -> bool: ...


class ServedRun(Protocol):
    """What the gauges read of a run (``agents/runner.AgentRun``, which imports this module:
    a Protocol, so the import runs one way)."""

    @property
    def controller(self) -> ServedCall: ...
    @property
    def outbox(self) -> Outbox: ...


_runs: weakref.WeakValueDictionary[int, ServedRun] = weakref.WeakValueDictionary()  # AgentRun is unhashable
_refresher: asyncio.Task[None] | None = None


def observe_tool_call(
    flow: str, transitions_before: int, transitions_after: int, local: bool, seconds: float
) -> None:
    """After a tool call: a transition if the call's transition count moved."""
    if transitions_after > transitions_before:
        TRANSITIONS.labels(flow).inc(transitions_after - transitions_before)
        if local:
            TRANSITION_SECONDS.labels(flow).observe(seconds)


def track(run: ServedRun) -> None:
    """Count this run in the gauges while it serves its call."""
    global _refresher
    _runs[id(run)] = run
    previous = run.outbox.on_error

    def on_error(exc: BaseException) -> None:
        SIGNALS_FAILED.inc()
        if previous is not None:
            previous(exc)

    run.outbox.on_error = on_error
    refresh()
    if _refresher is None or _refresher.done():
        _refresher = asyncio.get_running_loop().create_task(_refresh_forever(), name="ringflow-agent-metrics")


def refresh() -> bool:
    """Set the gauges from the runs alive; False once none is left to watch."""
    active = pending = 0
    oldest = 0.0
    for run in list(_runs.values()):
        controller = run.controller
        if controller.dead or (controller.ended and not run.outbox.pending):
            continue
        active += not controller.ended
        pending += run.outbox.pending
        oldest = max(oldest, run.outbox.oldest_pending_age_s or 0.0)
    CALLS_ACTIVE.set(active)
    OUTBOX_PENDING.set(pending)
    OUTBOX_OLDEST.set(oldest)
    return bool(active or pending)


async def _refresh_forever() -> None:
    """Every second while calls are served (gauges cannot be computed at scrape time in
    multiprocess mode); the next attach starts it again."""
    live = True
    while live:
        await asyncio.sleep(REFRESH_S)
        try:
            live = refresh()
        except Exception:  # metrics must never take the agent down
            live = True
