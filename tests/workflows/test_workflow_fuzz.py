"""Fuzzing a live call: random payloads to every signal and update of a real CallWorkflow
on the dev server, then the fault suite's invariants on every call that took them (no
failed workflow task, each call ends, one webhook, the whole transcript in the record and
the webhook). Bounded: a fixed number of examples, each one RPC, about half a minute.

Hypothesis drives the examples from a worker thread, each example's RPC running on the
test's event loop (where the Temporal client lives)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from ringflow.workflows.client import CallHandle
from tests.support.hostile import finished, raw, worker_with_hooks
from tests.support.wfkit import start

SIGNALS = ["events", "transition", "turns", "event", "hangup", "heartbeat", "room_event"]
UPDATES = ["attach", "call_function"]

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)


def valid(name: str, seq: int) -> dict[str, Any]:
    """A well-formed payload for ``name`` to mutate (ids and seqs fresh, so some apply)."""
    eid = f"fz-{seq}-{name}"
    now = time.time()
    turn = {"role": "user", "text": "hello", "started_at": now}
    return {
        "events": {"events": [{"type": "turns", "event_id": eid, "seq": seq, "items": [turn]}]},
        "transition": {"event_id": eid, "seq": seq, "from_node": "verify", "name": "confirmed", "at": now},
        "turns": {"event_id": eid, "seq": seq, "items": [turn], "at": now},
        "event": {"event_id": eid, "kind": "user_idle", "at": now},
        "hangup": {"event_id": eid, "reason": "user_hangup", "at": now},
        "heartbeat": {"agent_id": "fuzz-agent", "at": now},
        "room_event": {"event_id": eid, "kind": "agent_left", "identity": "fuzz-agent"},
        "attach": {"agent_id": "fuzz-agent"},
        "call_function": {"event_id": eid, "node": "offer", "name": "list_slots", "args": {}},
    }[name]


@st.composite
def payloads(draw: st.DrawFn, name: str) -> list[Any]:
    how = draw(st.sampled_from(["mutate", "mutate", "json", "raw", "none", "two"]))
    if how == "none":
        return []
    if how == "raw":
        enc = draw(st.sampled_from(["binary/plain", "json/plain", "binary/null", "binary/zip", ""]))
        return [raw(draw(st.binary(max_size=40)), enc)]
    if how == "json":
        return [draw(JSON)]
    if how == "two":
        return [draw(JSON), draw(JSON)]
    body = valid(name, draw(st.integers(1, 6)))
    target = body["events"][0] if name == "events" else body
    key = draw(st.sampled_from([*target.keys(), "extra"]))
    change = draw(st.sampled_from(["replace", "delete", "time"]))
    if change == "delete":
        target.pop(key, None)
    elif change == "time":
        target[key] = draw(st.sampled_from([1e20, -1.0, 2**64, "NaN", -(2**63)]))
    else:
        target[key] = draw(JSON)
    return [body]


OPS = st.sampled_from(SIGNALS + UPDATES + ["no_such_signal"]).flatmap(
    lambda name: st.tuples(st.just(name), payloads(name if name != "no_such_signal" else "event"))
)


@pytest.mark.timeout(180)
async def test_random_payloads_never_fail_a_workflow_task(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    loop = asyncio.get_running_loop()
    calls: list[CallHandle] = []

    def on_loop(coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=60)

    async def live_call() -> CallHandle:
        if calls:
            desc = await calls[-1].handle.describe()
            if desc.status == WorkflowExecutionStatus.RUNNING:
                return calls[-1]
        calls.append(await start(temporal_client, task_queue, gap_wait_s=2.0))
        return calls[-1]

    async def send(name: str, args: list[Any]) -> None:
        call = await live_call()
        if name in UPDATES:
            try:
                await asyncio.wait_for(call.handle.execute_update(name, args=args), timeout=10)
            except Exception:  # a refused or failed update is the workflow's answer, not ours
                pass
            return
        try:
            await call.handle.signal(name, args=args)
        except RPCError as err:
            # A valid hangup among the random payloads ends the call; one still RUNNING when
            # described can complete before this signal lands. The server's answer is then
            # NOT_FOUND, and the call's invariants are still checked at the end.
            if err.status != RPCStatusCode.NOT_FOUND:
                raise

    @settings(
        max_examples=60,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(op=OPS)
    def one(op: tuple[str, list[Any]]) -> None:
        on_loop(send(*op))

    async with worker_with_hooks(temporal_client, task_queue, sqlite_url) as hooks:
        await asyncio.to_thread(one)
        for call in calls:
            desc = await call.handle.describe()
            if desc.status == WorkflowExecutionStatus.RUNNING:
                await call.hangup("user_hangup")
            out = await finished(call, hooks, sqlite_url)
            assert out["result"].end_reason is not None
    assert calls
