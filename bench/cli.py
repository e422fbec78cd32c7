"""CLI start-up bench: what a ``ringflow`` command costs before it does anything.

Prints one JSON document (``_report.emit``). Metrics, each a fresh process timed from
spawn to exit (wall, ms), its samples interleaved with the baseline's so a slow patch of
the machine hits both:

* ``cli_help``: ``ringflow --help``. The root app lists its commands without importing
  any of them (``ringflow/cli/__init__.py``): no Temporal SDK, no LiveKit, no pydantic.
* ``flow_validate``: ``ringflow flow validate`` of an example flow (its handlers module
  imported, as the command does): the flow model, the validator and jsonschema, nothing
  of Temporal's.

Baseline: ``python -c pass`` with the same interpreter, the least a Python command costs.
Beside each p50 the document gives ``cpu_p50`` (user + system CPU of the child, ms), which
a loaded machine inflates far less than wall time. Target: p50 under 500 ms for both.
``RINGFLOW_BENCH_SHORT=1`` takes 5 samples of each, the full run 20.
Run: ``.venv/bin/python bench/cli.py``.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import emit, percentile

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


def run_once(argv: list[str]) -> tuple[float, float]:
    """(wall ms, child CPU ms) of one process run to its end."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    wall = (time.perf_counter() - t0) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[1:])} exited {proc.returncode}: {proc.stderr.decode()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return wall, cpu


def measure(name: str, argv: list[str]) -> dict[str, Any]:
    run_once(argv)  # warm the file cache and the bytecode cache once, for both sides
    run_once(BASELINE)
    walls: list[float] = []
    cpus: list[float] = []
    base: list[float] = []
    for i in range(N):
        if i % 2:
            w, c = run_once(argv)
            base.append(run_once(BASELINE)[0])
        else:
            base.append(run_once(BASELINE)[0])
            w, c = run_once(argv)
        walls.append(w)
        cpus.append(c)
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
    }


def main() -> None:
    emit("cli", [measure(name, argv) for name, argv in COMMANDS.items()])


if __name__ == "__main__":
    main()
