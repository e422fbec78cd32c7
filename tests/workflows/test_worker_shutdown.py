"""SIGTERM to ``ringflow worker`` under live calls: no call waits out the sticky queue.

Two real ``ringflow worker`` processes on a real dev server. Worker A serves some calls
(so it holds them in its sticky cache), B joins, A gets SIGTERM as Kubernetes sends it.
The next ``call_function`` update of each call must then be served by B without the
server first timing out a workflow task on A's sticky queue (which is what a SIGKILLed
or default-SIGTERMed worker costs: ~10 s of dead air). Asserted from the histories, not
from a clock; ``bench/worker_shutdown.py`` measures the time.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.client import Client

from ringflow.devstack import DevStack
from ringflow.workflows.client import CallHandle
from tests.support.wfkit import Agent, req, start, wait_state, wait_until
from tests.support.worker_process import NO_AGENT, Worker


@pytest.fixture
def workers(
    temporal_server: DevStack, task_queue: str, sqlite_url: str, tmp_path: Path
) -> Iterator[Callable[[], Worker]]:
    made: list[Worker] = []

    def spawn() -> Worker:
        log = tmp_path / f"worker{len(made)}.log"
        made.append(Worker(temporal_server.address, task_queue, sqlite_url, log))
        return made[-1]

    yield spawn
    for w in made:
        w.stop()


async def _completed_by(call: CallHandle) -> tuple[list[str], int]:
    """Identities of the workers that completed workflow tasks, and how many workflow tasks
    timed out waiting on a sticky queue (schedule-to-start)."""
    identities: list[str] = []
    sticky_timeouts = 0
    async for ev in call.handle.fetch_history_events():
        if ev.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            identities.append(ev.workflow_task_completed_event_attributes.identity)
        elif ev.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
            if (
                ev.workflow_task_timed_out_event_attributes.timeout_type
                == TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START
            ):
                sticky_timeouts += 1
    return identities, sticky_timeouts


async def test_sigterm_hands_live_calls_to_another_worker_at_once(
    temporal_client: Client, task_queue: str, workers: Callable[[], Worker]
) -> None:
    a = workers()
    await a.wait_ready()
    calls = [await start(temporal_client, task_queue, agent_timeout_s=NO_AGENT) for _ in range(3)]
    for call in calls:
        agent = Agent(call)
        await agent.say(("user", "yes that's me"))
        await agent.transition("verify", "confirmed")
        await wait_state(call, lambda s: s.node == "offer", timeout=30, what="node offer")
        assert (await call.call_function(req("offer", "list_slots"))).result == {"slots": ["Mon 9"]}
    for call in calls:  # all of A's so far: A holds every call in its sticky cache
        ids, _ = await _completed_by(call)
        assert ids and all(i.startswith(a.identity_prefix) for i in ids)

    b = workers()
    await b.wait_ready()
    a.proc.send_signal(signal.SIGTERM)

    async def a_unready() -> bool:  # unready (or gone) once it is told to stop
        return a.probe("/readyz") in (None, (503, {"ready": False}))

    await wait_until(a_unready, timeout=10, what="A unready")

    async def a_exited() -> bool:
        return a.proc.poll() is not None

    await wait_until(a_exited, timeout=30, what="A exits")
    assert a.proc.returncode == 0, a.stderr()
    assert "worker stopped gracefully" in a.stderr()

    for call in calls:
        booked = await call.call_function(req("offer", "book", slot="Mon 9"))
        assert booked.decision == "end" and booked.result == {"status": "booked", "slot": "Mon 9"}
        ids, sticky_timeouts = await _completed_by(call)
        assert ids[-1].startswith(b.identity_prefix), ids
        assert sticky_timeouts == 0, f"{call.call_id}: a task waited on the dead worker's sticky queue"
        record = await wait_until(lambda c=call: c.handle.result(), timeout=30, what="call result")
        assert record.disposition == "booked"
        assert [t["text"] for t in record.transcript] == ["yes that's me"]
