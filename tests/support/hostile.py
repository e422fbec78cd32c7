"""Kit for the fault suite: raw payloads as a hostile client sends them, a webhook
receiver, and the invariants every hostile input must leave intact."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client
from temporalio.common import RawValue

from ringflow.activities.persistence import load_call
from ringflow.devstack import free_port
from ringflow.workflows.client import CallHandle
from tests.support.wfkit import running_worker, wait_until


def raw(data: bytes, encoding: str = "binary/plain") -> RawValue:
    """A payload as ``temporal workflow signal --input-meta encoding=...`` sends it."""
    return RawValue(Payload(metadata={"encoding": encoding.encode()}, data=data))


def raw_json(text: str) -> RawValue:
    """JSON text as-is, so it may hold what a JSON encoder would not write (``NaN``)."""
    return raw(text.encode(), "json/plain")


@dataclass
class Hooks:
    """A local webhook endpoint that records every delivery's JSON body."""

    url: str = ""
    bodies: list[dict[str, Any]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        self.bodies.append(json.loads(await request.read()))
        return web.json_response({"ok": True})

    def for_call(self, call_id: str) -> list[dict[str, Any]]:
        return [b for b in self.bodies if b.get("call_id") == call_id]


@asynccontextmanager
async def hooks() -> AsyncIterator[Hooks]:
    rec = Hooks()
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/hook", rec.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    rec.url = f"http://127.0.0.1:{port}/hook"
    try:
        yield rec
    finally:
        await runner.cleanup()


@asynccontextmanager
async def worker_with_hooks(client: Client, task_queue: str, database_url: str) -> AsyncIterator[Hooks]:
    async with hooks() as rec, running_worker(client, task_queue, database_url, webhook_url=rec.url):
        yield rec


async def task_failures(call: CallHandle) -> list[str]:
    """Every WorkflowTaskFailed of the call, across its continue-as-new runs, but those the
    server causes itself: ``UnhandledCommand`` is its answer to a task that completed the run
    (continue-as-new, the end) while a signal was arriving; the worker simply runs the next
    task with the signal in it, so that is not a failure of the workflow's code."""
    out: list[str] = []
    run_id: str | None = None
    seen: set[str] = set()
    handle = call.client.get_workflow_handle(call.handle.id)
    # Walk the chain from the first run: each run's last event names the next run.
    async for ev in handle.fetch_history_events():
        if ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            run_id = ev.workflow_execution_started_event_attributes.first_execution_run_id
            break
    while run_id and run_id not in seen:
        seen.add(run_id)
        nxt = None
        async for ev in call.client.get_workflow_handle(call.handle.id, run_id=run_id).fetch_history_events():
            attrs = ev.workflow_task_failed_event_attributes
            if (
                ev.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
                and attrs.cause != WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND
            ):
                out.append(attrs.failure.message)
            if ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                nxt = ev.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
        run_id = nxt
    return out


async def finished(call: CallHandle, rec: Hooks, database_url: str, timeout: float = 60) -> dict[str, Any]:
    """The call's result, stored record and webhook body, after checking that no workflow task
    failed and that the record and the webhook carry the same whole transcript."""
    result = await wait_until(lambda: call.handle.result(), timeout=timeout, what="the call's result")
    failures = await task_failures(call)
    assert failures == [], failures

    async def delivered() -> list[dict[str, Any]]:
        await asyncio.sleep(0)
        return rec.for_call(call.call_id)

    bodies = await wait_until(delivered, timeout=timeout, what="the webhook")
    assert len(bodies) == 1, f"{len(bodies)} webhooks for one call"
    stored = load_call(call.call_id, database_url=database_url)
    assert stored is not None
    idx = [t["idx"] for t in stored.transcript]
    assert idx == list(range(len(idx))), "the stored transcript has gaps or is out of order"
    assert [t["text"] for t in bodies[0]["transcript"]] == [t["text"] for t in stored.transcript]
    return {"result": result, "stored": stored, "webhook": bodies[0]}
