"""One simulated call on a real Temporal server with its spans kept in memory: the
OpenTelemetry SDK's ``InMemorySpanExporter`` behind Ringflow's tracer providers
(``ringflow.tracing.install``), the simulator's own worker and agent, the agent killed at
a turn and a new one attached. Prints the call's result, then one JSON line per span.

A process of its own: a tracer provider is global and cannot be taken back, and every test
after it in a pytest process would trace.

    python -m tests.support.traced_call ADDRESS SCRIPT KILL_AT
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ringflow import tracing
from tests.support.span_lines import print_spans


async def main(address: str, script: str, kill_at: int | None) -> None:
    from ringflow.simulation.simulator import environment, run_script

    async with environment(address) as (client, task_queue, llm, _):
        result = await run_script(Path(script), client, task_queue, llm, kill_at=kill_at)
    print(json.dumps({"ok": result.ok, "call_id": result.call_id, "error": result.error}))


if __name__ == "__main__":
    memory = InMemorySpanExporter()
    tracing.install(lambda: [memory], SimpleSpanProcessor)
    address, script, kill = sys.argv[1], sys.argv[2], sys.argv[3]
    asyncio.run(main(address, script, int(kill) if kill != "-" else None))
    print_spans(memory)
