"""Issues 13 and 27: a healthy call costs Temporal no workflow task of its own, and no timer
per signal.

The liveness timer of a call whose agent keeps talking must not fire (each firing is a
workflow task that applies nothing); it is moved later inside the tasks its signals cause
anyway, and only once half the agent timeout is gone (a timer started and cancelled on each
signal were two history events per signal). When the agent falls silent the timer still
fires and the agent is declared lost once it has been silent for the agent timeout, the
documented bound (docs/operating.md, "Lost agents").
Real dev server and worker (``tests/conftest.py``); the heartbeats are the traffic under
test, sent at a steady cadence, not a synchronisation.
"""

from __future__ import annotations

import asyncio

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tests.support.wfkit import running_worker, start, wait_state, wait_until

# The timer is moved later by a signal that comes once half the timeout is gone, so it
# would fire on a talking call only if no heartbeat was applied for TIMEOUT_S / 2: with 4 s,
# a 2 s stall of this process or the worker on a loaded machine was enough.
TIMEOUT_S = 10.0
TALK_S = 21.0  # more than two agent timeouts: the old timer would have fired twice
# The silent agent's loss is declared by the timer that fires TIMEOUT_S after its last sign
# of life; the task that runs it may start late on a loaded machine, by this much at most.
LOST_LATE_S = 3.0


async def test_a_talking_agent_causes_no_timer_tasks_and_a_silent_one_is_still_lost(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue, agent_timeout_s=TIMEOUT_S)
        await call.heartbeat("agent-a")
        await wait_state(call, lambda s: s.status == "live")
        loop = asyncio.get_running_loop()
        until = loop.time() + TALK_S
        while loop.time() < until:
            await call.heartbeat("agent-a")
            await asyncio.sleep(0.25)
        events = [e async for e in call.handle.fetch_history_events()]
        fired = sum(e.event_type == EventType.EVENT_TYPE_TIMER_FIRED for e in events)
        signals = sum(e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED for e in events)
        tasks = sum(e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED for e in events)
        started = sum(e.event_type == EventType.EVENT_TYPE_TIMER_STARTED for e in events)
        assert fired == 0, f"the liveness timer fired {fired} times on a call that kept talking"
        assert tasks <= signals + 2  # the start, and at most one task per signal
        # No timer per signal: the first arm, then at most one move per half timeout.
        assert signals > 40, signals
        assert started <= 2 + TALK_S / (TIMEOUT_S / 2), f"{started} timers for {signals} signals"
        record = await wait_until(lambda: call.handle.result(), timeout=60, what="agent_lost end")
        events = [e async for e in call.handle.fetch_history_events()]
    assert record.end_reason == "agent_lost"
    last_sign = max(
        e.event_time.ToDatetime().timestamp()
        for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    )
    # The loss is declared in the task a timer's firing runs: the first one TIMEOUT_S or more
    # after the last heartbeat (an earlier firing finds the agent seen since and moves on).
    fired_at = [
        e.event_time.ToDatetime().timestamp() - last_sign
        for e in events
        if e.event_type == EventType.EVENT_TYPE_TIMER_FIRED
        and e.event_time.ToDatetime().timestamp() > last_sign
    ]
    declared = min(t for t in fired_at if t >= TIMEOUT_S - 0.05)
    assert declared <= TIMEOUT_S + LOST_LATE_S, f"declared lost {declared:.1f} s after the last sign"
