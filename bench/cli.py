"""CLI start-up bench: what a ``ringflow`` command costs before it does anything.

Prints one JSON document (``_report.emit``). Metrics, each a fresh process timed from
spawn to exit (wall, ms), its samples interleaved with the baseline's so a slow patch of
the machine hits both:

* ``cli_help``: ``ringflow --help``. The root app lists its commands without importing
  any of them (``ringflow/cli/__init__.py``): no Temporal SDK, no LiveKit, no pydantic.
* ``flow_validate``: ``ringflow flow validate`` of an example flow (its handlers module
  imported, as the command does): the flow model and the validator; not jsonschema (its
  functions declare no ``parameters`` schema), not asyncio, nothing of Temporal's.
* ``call_list``: ``ringflow call list --json`` against a private Temporal dev server the
  bench starts itself (``_stack.bench_stack``: free ports, a temporary directory). Its
  baseline is not ``python -c pass`` but the same visibility query made by a minimal
  client in a fresh process (``Client.connect(...)`` then ``list_workflows``, the SDK
  imported and nothing else), so the ratio is the CLI's own overhead over the round trip
  it cannot avoid: typer, the settings, the codec and the tracing hook ``connect`` adds.

Baseline (``cli_help``, ``flow_validate``): ``python -c pass`` with the same interpreter,
the least a Python command costs. Every child runs with ``PYTHONDONTWRITEBYTECODE`` unset,
so that the warm-up run leaves the bytecode cache an installed package has (pip compiles it
at install): with the variable set, each run would compile Ringflow's modules from source
again, some 100 ms that no user's ``ringflow`` pays.
Beside each p50 the document gives ``cpu_p50`` (user + system CPU of the child, ms), which
a loaded machine inflates far less than wall time. Target: p50 under 500 ms for both.
``RINGFLOW_BENCH_SHORT=1`` takes 5 samples of each, the full run 20.
Run: ``.venv/bin/python bench/cli.py``.
"""

from __future__ import annotations

import asyncio
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import emit, percentile
from _stack import bench_stack

ROOT = Path(__file__).resolve().parent.parent
SHORT = os.environ.get("RINGFLOW_BENCH_SHORT") == "1"
N = 5 if SHORT else 20
RINGFLOW = [sys.executable, "-m", "ringflow.cli"]
BASELINE = [sys.executable, "-c", "pass"]
FLOW = "examples/flows/appointment_reminder/flow.yaml"
COMMANDS = {
    "cli_help": [*RINGFLOW, "--help"],
    "flow_validate": [*RINGFLOW, "flow", "validate", FLOW],
}
LIST_QUERY = "WorkflowType = 'CallWorkflow'"  # what `ringflow call list` asks with no filter
# freed before the loop closes, as ringflow/cli/run.py does (temporalio/sdk-python#300: a
# client left to the interpreter's teardown aborts about half the runs)
MINIMAL_LIST = f"""
import asyncio, gc, sys
from temporalio.client import Client

async def main():
    client = await Client.connect(sys.argv[1], namespace=sys.argv[2])
    print([wf.id async for wf in client.list_workflows({LIST_QUERY!r}, limit=100)])
    del client
    gc.collect()

asyncio.run(main())
"""


def run_once(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall ms, child CPU ms) of one process run to its end."""
    child_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        argv,
        cwd=ROOT,
        env={**child_env, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=False,
    )
    wall = (time.perf_counter() - t0) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[1:])} exited {proc.returncode}: {proc.stderr.decode()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return wall, cpu


def measure(
    name: str, argv: list[str], baseline: list[str] = BASELINE, env: dict[str, str] | None = None
) -> dict[str, Any]:
    run_once(argv, env)  # warm the file cache and the bytecode cache once, for both sides
    run_once(baseline, env)
    walls: list[float] = []
    cpus: list[float] = []
    base: list[float] = []
    base_cpus: list[float] = []
    for i in range(N):
        if i % 2:
            w, c = run_once(argv, env)
            bw, bc = run_once(baseline, env)
        else:
            bw, bc = run_once(baseline, env)
            w, c = run_once(argv, env)
        walls.append(w)
        cpus.append(c)
        base.append(bw)
        base_cpus.append(bc)
    p50, base_p50 = percentile(walls, 50), percentile(base, 50)
    return {
        "name": name,
        "unit": "ms",
        "p50": round(p50, 1),
        "p99": round(percentile(walls, 99), 1),
        "baseline_p50": round(base_p50, 1),
        "ratio": round(p50 / base_p50, 1) if base_p50 else None,
        "n": N,
        "cpu_p50": round(percentile(cpus, 50), 1),
        "baseline_cpu_p50": round(percentile(base_cpus, 50), 1),
    }


async def call_list() -> dict[str, Any]:
    """``call_list`` against a dev server of its own, the minimal client as the baseline."""
    async with bench_stack() as bench:
        address, namespace = bench.stack.address, bench.stack.namespace
        env = {"RINGFLOW_TEMPORAL_ADDRESS": address, "RINGFLOW_TEMPORAL_NAMESPACE": namespace}
        minimal = [sys.executable, "-c", MINIMAL_LIST, address, namespace]
        return measure("call_list", [*RINGFLOW, "call", "list", "--json"], minimal, env)


def main() -> None:
    results = [measure(name, argv) for name, argv in COMMANDS.items()]
    results.append(asyncio.run(call_list()))
    emit("cli", results)


if __name__ == "__main__":
    main()
