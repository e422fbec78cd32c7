"""History bench: the bytes of one call's Temporal history, by flow reference and by copy.

Prints one JSON document (``_report.emit``). The simulator's stack (a private dev server,
its worker, the scripted LLM and the LiveKit fake, ``ringflow/simulation/simulator.py``)
runs the 6-turn example script ``examples/scripts/appointment_reminder_reschedule.yaml``
end to end through the real agent, alternately:

* by reference (``history_bytes_per_call``): the flow is published once and the call names
  the version; its input, the agent's snapshots and any continue-as-new input leave the
  definition out (``ringflow/flow_codec.py``);
* by copy (``baseline_p50``): the call carries the definition, as a call started from a bare
  definition does (and as every call did before flow versions).

Each sample is the history's protobuf size as the server stores it (``History.ByteSize`` of
every event, payloads encrypted as in production), so ``ratio`` (reference / copy) is the
share of the history the flow reference leaves: the target is at most 0.2 (5x smaller).
``history_events_per_call`` counts the events the same way. ``RINGFLOW_BENCH_SHORT=1``: one
call of each.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import emit, percentile
from _stack import ROOT
from temporalio.api.history.v1 import History
from temporalio.client import Client

from ringflow.activities.persistence import dispose_engines
from ringflow.simulation.simulator import environment, run_script

SCRIPT = Path("examples/scripts/appointment_reminder_reschedule.yaml")  # relative to ROOT
CALLS = 5


async def history_of(client: Client, workflow_id: str) -> tuple[int, int]:
    """Bytes and events of the call's whole history, every run of it."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    events = list(history.events)
    return History(events=events).ByteSize(), len(events)


def metric(name: str, unit: str, samples: list[float], baseline: list[float]) -> dict[str, Any]:
    p50, b50 = percentile(samples, 50), percentile(baseline, 50)
    return {
        "name": name,
        "unit": unit,
        "p50": p50,
        "p99": percentile(samples, 99),
        "baseline_p50": b50,
        "ratio": round(p50 / b50, 3) if b50 else None,
        "n": len(samples),
    }


async def run() -> list[dict[str, Any]]:
    calls = 1 if os.environ.get("RINGFLOW_BENCH_SHORT") else CALLS
    by_ref: list[tuple[int, int]] = []
    by_copy: list[tuple[int, int]] = []
    with tempfile.TemporaryDirectory(prefix="ringflow-bench-versions-") as tmp:
        versions_db = f"sqlite:///{tmp}/versions.db"
        async with environment(None) as (client, task_queue, llm, _stack):
            for _ in range(calls):
                for publish_to, into in ((None, by_copy), (versions_db, by_ref)):
                    result = await run_script(SCRIPT, client, task_queue, llm, publish_to=publish_to)
                    if not result.ok:
                        raise SystemExit(f"bench: {SCRIPT} failed: {result.error or result.failures}")
                    into.append(await history_of(client, result.workflow_id))
        dispose_engines()
    return [
        metric("history_bytes_per_call", "bytes", [b for b, _ in by_ref], [b for b, _ in by_copy]),
        metric("history_events_per_call", "events", [e for _, e in by_ref], [e for _, e in by_copy]),
    ]


def main() -> None:
    os.chdir(ROOT)
    emit("history", asyncio.run(run()))


if __name__ == "__main__":
    main()
