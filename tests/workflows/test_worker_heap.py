"""What a worker holding many live calls keeps per call, and what each call costs the server
(issue 13): one flow and one workflow class shared by every call of a flow, collector
pauses exported, and search attributes for the node that trail the call instead of an
upsert per transition. On the real dev server, with the real worker."""

from __future__ import annotations

import gc
import re
import uuid
from typing import Any

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner

from ringflow.activities.search_attributes import RINGFLOW_NODE, RINGFLOW_STATUS, RINGFLOW_TRANSITIONS
from ringflow.callflow.loader import validate_data
from ringflow.callflow.model import FlowDefinition
from ringflow.devstack import free_port
from ringflow.workflows.call import CallWorkflow
from ringflow.workflows.client import CallHandle, start_call
from ringflow.workflows.heap import GC_PAUSE_METRIC, YOUNG_THRESHOLD, GcPauses, settle_heap
from ringflow.workflows.worker import build_worker, prometheus_runtime, worker_tuning
from tests.support.wfkit import Agent, running_worker, settings_for, wait_state, wait_until

SESSION = pytest.mark.asyncio(loop_scope="session")


def flip(to: str) -> dict[str, Any]:
    return {"name": "flip", "transition_only": True, "description": "Flip.", "transition_to": to}


def ping_pong() -> FlowDefinition:
    report = validate_data(
        {
            "flow": "pingpong",
            "nodes": {
                "ping": {"task": "Ping.", "functions": [flip("pong"), {**flip("bye"), "name": "finish"}]},
                "pong": {"task": "Pong.", "functions": [flip("ping"), {**flip("bye"), "name": "finish"}]},
                "bye": {"type": "end", "task": "Bye.", "disposition": "done"},
            },
        }
    )
    assert report.definition is not None, report.errors
    return report.definition


async def open_call(client: Client, task_queue: str, **fields: Any) -> tuple[CallHandle, Agent]:
    call = await start_call(
        client, ping_pong(), task_queue=task_queue, call_id=f"heap-{uuid.uuid4().hex[:8]}", **fields
    )
    await call.attach("agent-1")
    return call, Agent(call)


def live_calls(*call_ids: str) -> list[CallWorkflow]:
    """The workflow objects this process's worker holds in its cache for these calls."""
    found = {
        o.d.inp.call_id: o
        for o in gc.get_objects()
        if type(o).__name__ == "CallWorkflow" and getattr(getattr(o, "d", None), "inp", None)
    }
    return [found[c] for c in call_ids if c in found]


async def shown(call: CallHandle) -> Any:
    """The call's search attributes as Temporal shows them now."""
    return (await call.handle.describe()).typed_search_attributes


async def on_pong(client: Client, task_queue: str, refresh_s: float) -> CallHandle:
    """A live call moved once, from ping to pong, with this ``visibility_refresh_s``."""
    call, agent = await open_call(client, task_queue, visibility_refresh_s=refresh_s)
    await agent.transition("ping", "flip")
    await wait_state(call, lambda v: v.node == "pong", what="the call on pong")
    return call


async def hang_up(call: CallHandle) -> None:
    await call.hangup()
    await call.handle.result()


async def upserts(call: CallHandle) -> list[list[str]]:
    """Ringflow's search attributes each upsert in the call's history wrote (the SDK's own
    upsert of ``TemporalChangeVersion``, once a run for a patch, is not Ringflow's)."""
    out = []
    async for ev in call.handle.fetch_history_events():
        if ev.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            fields = ev.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
            if ours := sorted(k for k in fields if k.startswith("Ringflow")):
                out.append(ours)
    return out


@SESSION
async def test_calls_of_one_flow_share_its_definition_and_the_workflow_class(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """Each call decodes its own copy of the flow from its input; a worker holding a
    thousand calls walked a thousand copies in every full collection. The copy is swapped
    for the one compiled for every call of that flow, and the workflow module is not
    imported anew for each run (workflows.worker.workflow_runner)."""
    async with running_worker(temporal_client, task_queue, sqlite_url):
        (a, _), (b, _) = [await open_call(temporal_client, task_queue) for _ in range(2)]
        wa, wb = await wait_until(
            lambda: _pair(a.call_id, b.call_id), what="both calls in the worker's cache"
        )
        assert wa is not wb
        assert wa.d.inp.definition is wb.d.inp.definition  # one flow, not one per call
        assert wa.d.inp.definition is wa.d.engine.definition  # the compiled one
        assert wa.d.inp.definition == ping_pong()  # and equal to what was sent
        assert type(wa) is CallWorkflow and type(wb) is CallWorkflow  # one class, not one per run
        for call in (a, b):
            await hang_up(call)


async def _pair(a: str, b: str) -> list[CallWorkflow] | None:
    found = live_calls(a, b)
    return found if len(found) == 2 else None


@SESSION
async def test_the_node_trails_the_call_in_search_attributes_but_status_goes_at_once(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call, agent = await open_call(temporal_client, task_queue, visibility_refresh_s=3600)

        async def live() -> bool:
            return (await shown(call)).get(RINGFLOW_STATUS) == "live"

        await wait_until(live, what="the call shown live")
        first = await upserts(call)
        node = "ping"
        for _ in range(4):
            await agent.transition(node, "flip")
            node = "pong" if node == "ping" else "ping"
            await wait_state(call, lambda v, n=node: v.node == n, what=f"the call on {node}")
        view = await call.state()
        assert view.transitions == 4 and view.node == "ping"
        attrs = await shown(call)
        # the search attributes still show where the call was at its last upsert...
        assert attrs.get(RINGFLOW_TRANSITIONS) == 0 and attrs.get(RINGFLOW_NODE) == "ping"
        assert await upserts(call) == first  # ...and no transition wrote one
        # the end goes at once, and takes the node and the count with it
        await agent.transition("ping", "finish")
        await call.hangup("completed")
        await call.handle.result()
        attrs = await shown(call)
        assert attrs.get(RINGFLOW_STATUS) == "ended"
        assert attrs.get(RINGFLOW_NODE) == "bye" and attrs.get(RINGFLOW_TRANSITIONS) == 5


@SESSION
async def test_a_trailing_node_is_written_by_the_next_task_once_its_time_is_up(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await on_pong(temporal_client, task_queue, refresh_s=1)

        async def node_shown() -> bool:
            # a heartbeat: a workflow task that runs anyway, which the upsert rides
            await call.heartbeat("agent-1")
            return (await shown(call)).get(RINGFLOW_NODE) == "pong"

        await wait_until(node_shown, what="the node written once visibility_refresh_s passed")
        await hang_up(call)


@SESSION
async def test_every_transition_writes_the_node_when_refresh_is_zero(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await on_pong(temporal_client, task_queue, refresh_s=0)
        attrs = await shown(call)
        assert attrs.get(RINGFLOW_NODE) == "pong" and attrs.get(RINGFLOW_TRANSITIONS) == 1
        await hang_up(call)


def test_a_refresh_out_of_range_is_refused() -> None:
    from pydantic import ValidationError

    from ringflow.contract.call import CallInput

    with pytest.raises(ValidationError, match="visibility_refresh_s"):
        CallInput(call_id="c1", definition=ping_pong(), visibility_refresh_s=-1)


def test_a_worker_settles_its_heap_and_keeps_temporaries_young() -> None:
    """The heap at start is frozen, and the young generation is widened (never narrowed):
    what workflow tasks hold for a moment dies young instead of filling the old generation
    that full collections walk (workflows/heap.py)."""
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, before[1], before[2])
        settle_heap()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (YOUNG_THRESHOLD, before[1], before[2])
        gc.set_threshold(YOUNG_THRESHOLD * 2, before[1], before[2])
        settle_heap()  # a wider setting someone chose stays
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD * 2
    finally:
        gc.set_threshold(*before)


@SESSION
async def test_collector_pauses_are_exported_by_generation() -> None:
    port = free_port()
    runtime = prometheus_runtime(port)
    pauses = GcPauses(runtime.metric_meter).install()
    try:
        gc.collect()  # a full collection, timed by the callback

        async def full_collections() -> float:
            async with httpx.AsyncClient(timeout=5) as http:
                text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
            m = re.search(rf'^{GC_PAUSE_METRIC}_count\{{[^}}]*generation="2"[^}}]*\}} (\S+)', text, re.M)
            return float(m.group(1)) if m else 0.0

        assert await wait_until(full_collections, what="the full collection exported") >= 1
    finally:
        pauses.remove()


@SESSION
async def test_the_deployed_worker_runs_calls_unsandboxed_and_they_replay_in_the_sandbox(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """``RINGFLOW_WORKER_SANDBOX=false`` (the deployed worker) runs the same workflow code
    outside the sandbox; a call it ran replays in the sandbox, so neither differs."""
    settings = settings_for(sqlite_url, worker_sandbox=False)
    tuning = worker_tuning(settings)
    assert isinstance(tuning["workflow_runner"], UnsandboxedWorkflowRunner)
    assert "workflow_runner" not in worker_tuning(settings_for(sqlite_url))  # the default: sandboxed
    async with build_worker(temporal_client, settings, task_queue=task_queue, **tuning):
        call, agent = await open_call(temporal_client, task_queue)
        await agent.say(("assistant", "Ping."), ("user", "Pong."))
        await agent.transition("ping", "flip")
        await agent.transition("pong", "finish")
        await call.hangup("completed")
        record = await call.handle.result()
    assert record.path == ["ping", "pong", "bye"] and record.end_reason == "completed"
    said = [t["text"] for t in record.transcript if t.get("role") in ("user", "assistant")]
    assert said == ["Ping.", "Pong."]
    history = await call.handle.fetch_history()
    # the client's converter: its payloads may be encrypted (ringflow.codec)
    replayer = Replayer(workflows=[CallWorkflow], data_converter=temporal_client.data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
