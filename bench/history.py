"""History bench: the bytes of one call's Temporal history, by flow reference and by copy.

Prints one JSON document (``_report.emit``). The simulator's stack (a private dev server,
its worker, the scripted LLM and the LiveKit fake, ``ringflow/simulation/simulator.py``)
runs the 6-turn example script ``examples/scripts/appointment_reminder_reschedule.yaml``
end to end through the real agent, four ways in turn, in the same run:

* today's design (``history_bytes_per_call``): the flow is published once and the call names
  the version (its input, the agent's snapshots and any continue-as-new input leave the
  definition out, ``ringflow/flow_codec.py``), and every payload is deflated before it is
  encrypted (``ringflow/compression.py``);
* the baseline (``baseline_p50``), the copy-in design as it was: the call carries the
  definition, as a call started from a bare definition does and every call did before flow
  versions, and payloads are encrypted uncompressed, as before compression;
* each lever alone against the same baseline: ``history_bytes_reference_only`` (by
  reference, uncompressed) and ``history_bytes_compression_only`` (by copy, compressed: what
  a call started from a bare definition writes today).

The worker and the client share one codec, whose ``compress`` switch the bench sets before
each call (nothing of the previous call is still running then). Each sample is the history's
protobuf size as the server stores it (``History.ByteSize`` of every event, payloads
encrypted as in production), so ``ratio`` (today / baseline) is the share of the copy-in
history today's design leaves: the target is at most 0.2 (5x smaller).
``history_events_per_call`` counts the events the same way (compression changes no event).
``history_bytes_outside_payloads`` is today's history less every payload in it (ids, times,
task queues, identities, the events' own framing): the floor that no cut of what the
payloads carry goes under, so a ratio near 0.2 there says the target needs fewer events.
``RINGFLOW_BENCH_SHORT=1``: one call of each.
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
from ringflow.codec import ephemeral_codec
from ringflow.contract.updates import CallFunctionRequest, CallFunctionResult
from ringflow.settings import get_settings
from ringflow.simulation.simulator import environment, run_script
from ringflow.workflows.client import CallHandle
from tests.support.payloads import payloads_in

SCRIPT = Path("examples/scripts/appointment_reminder_reschedule.yaml")  # relative to ROOT
CALLS = 5


_CALL_FUNCTION = CallHandle.call_function


def whole_function_answers(whole: bool) -> None:
    """The copy-in design, and each lever alone, asked for whole function answers (the
    engine's effects and the state) as agents did before outcomes: the agent's requests
    leave out its state's digest (``workflows/function_answers.py``), so the workflow answers
    whole, as it does an agent one release older."""

    async def whole_answer(self: CallHandle, req: CallFunctionRequest) -> CallFunctionResult:
        return await _CALL_FUNCTION(self, req.model_copy(update={"state_digest": None}))

    CallHandle.call_function = whole_answer if whole else _CALL_FUNCTION  # type: ignore[method-assign]


async def history_of(client: Client, workflow_id: str) -> tuple[int, int, int]:
    """Bytes, events and payload bytes of the call's whole history, every run of it."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    events = list(history.events)
    carried = sum(p.ByteSize() for e in events for p in payloads_in(e))
    return History(events=events).ByteSize(), len(events), carried


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
    samples: dict[tuple[bool, bool], list[tuple[int, int, int]]] = {}  # (by reference, compressed)
    codec = ephemeral_codec(get_settings())  # the embedded server's own key, as environment() makes
    if codec.keyring is None:
        raise SystemExit("bench: payload encryption is off (RINGFLOW_ENCRYPTION=0); it measures production's")
    with tempfile.TemporaryDirectory(prefix="ringflow-bench-versions-") as tmp:
        versions_db = f"sqlite:///{tmp}/versions.db"
        async with environment(None, codec=codec) as (client, task_queue, llm, _stack):
            for _ in range(calls):
                for by_ref, compressed in ((False, False), (True, True), (True, False), (False, True)):
                    codec.compress = compressed
                    whole_function_answers(not by_ref or not compressed)
                    publish_to = versions_db if by_ref else None
                    result = await run_script(SCRIPT, client, task_queue, llm, publish_to=publish_to)
                    if not result.ok:
                        raise SystemExit(f"bench: {SCRIPT} failed: {result.error or result.failures}")
                    sample = await history_of(client, result.workflow_id)
                    samples.setdefault((by_ref, compressed), []).append(sample)
            codec.compress = True
        dispose_engines()
    baseline = samples[False, False]

    def against_baseline(name: str, key: tuple[bool, bool], index: int, unit: str) -> dict[str, Any]:
        ours, theirs = ([float(s[index]) for s in got] for got in (samples[key], baseline))
        return metric(name, unit, ours, theirs)

    outside = [float(s[0] - s[2]) for s in samples[True, True]]
    return [
        against_baseline("history_bytes_per_call", (True, True), 0, "bytes"),
        metric("history_bytes_outside_payloads", "bytes", outside, [float(s[0]) for s in baseline]),
        against_baseline("history_events_per_call", (True, True), 1, "events"),
        against_baseline("history_bytes_reference_only", (True, False), 0, "bytes"),
        against_baseline("history_bytes_compression_only", (False, True), 0, "bytes"),
    ]


def main() -> None:
    os.chdir(ROOT)
    emit("history", asyncio.run(run()))


if __name__ == "__main__":
    main()
