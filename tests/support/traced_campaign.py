"""A campaign of two contacts on a real Temporal server with its spans kept in memory (the
SDK's ``InMemorySpanExporter`` behind Ringflow's tracer providers), the calls dialed into
the LiveKit fake and ended by a stand-in agent that traces its hangup as a real agent traces
its work: in the call's trace, read from the call's input (``agents/call_trace.py``).
Prints the campaign's call ids, then one JSON line per span.

A process of its own: a tracer provider is global and cannot be taken back.

    python -m tests.support.traced_campaign ADDRESS NAMESPACE DATABASE_URL TASK_QUEUE
"""

from __future__ import annotations

import asyncio
import json
import sys
from contextlib import suppress

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client

from ringflow import tracing
from ringflow.activities import campaign_store as store
from ringflow.agents.call_trace import call_context
from ringflow.simulation.livekit_fake import FakeLiveKit
from ringflow.temporal_setup import connect
from tests.support.campaignkit import (
    REDIS,
    campaign_input,
    contacts,
    fake_line,
    live_calls,
    new_id,
    run_campaign,
)
from tests.support.span_lines import print_spans
from tests.support.wfkit import running_worker


async def traced_agent(client: Client, lk: FakeLiveKit) -> None:
    """Hangs up each answered call under a span in the call's own trace."""
    async for d, call in live_calls(client, lk):
        with suppress(Exception):
            ctx = await call_context(client, d.room_name)
            with trace.get_tracer("ringflow.agent").start_as_current_span(
                "ringflow.agent.hangup", ctx, attributes={"ringflow.call_id": d.room_name}
            ):
                await call.hangup("user_hangup")


async def main(address: str, namespace: str, database_url: str, task_queue: str) -> list[str]:
    client = await connect(address, namespace)
    monkeypatch = pytest.MonkeyPatch()
    try:
        async with (
            fake_line(monkeypatch) as lk,
            running_worker(client, task_queue, database_url, redis_url=REDIS),
        ):
            agent = asyncio.create_task(traced_agent(client, lk))
            try:
                cid = new_id()
                inp = campaign_input(cid, new_id("T"), max_concurrent=2, cps=20)
                handle = await run_campaign(
                    client, task_queue, database_url, inp, contacts("+12125550901", "+12125550902")
                )
                result = await handle.result()
                assert result["status"] == "finished", result
            finally:
                agent.cancel()
                with suppress(asyncio.CancelledError):
                    await agent
    finally:
        monkeypatch.undo()
    return [a["call_id"] for a in store.attempts(database_url, cid)]


if __name__ == "__main__":
    memory = InMemorySpanExporter()
    tracing.install(lambda: [memory], SimpleSpanProcessor)
    call_ids = asyncio.run(main(*sys.argv[1:5]))
    print(json.dumps({"call_ids": call_ids}))
    print_spans(memory)
