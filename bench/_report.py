"""Shared by the benches: time a callable, reduce the samples, print the one JSON document.

Every bench prints exactly one document of the shape ``{"bench": NAME, "machine": {...},
"metrics": [{"name", "unit", "p50", "p99", "baseline_p50", "ratio", "n"}]}`` so that CI
can compare runs. ``baseline_p50`` is a trivial operation timed in the same
run and the same way, which makes ``ratio`` comparable across machines of different speed.
Beside the metrics the document carries ``machine``: a fixed CPU probe timed where the
bench ran (``cpu_probe``), so that the absolute figures of runs on different machines can
be compared too.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import IO, Any

UNITS_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def sample_ns(fn: Callable[[], object], n: int = 20_000, warmup: int = 2_000) -> list[int]:
    """``n`` timings of one call each, in ns, after ``warmup`` untimed calls.

    Each call is timed on its own (not a loop divided by n) so that p99 means something;
    the garbage collector stays on, because it runs in production too.
    """
    for _ in range(warmup):
        fn()
    clock = time.perf_counter_ns
    out = [0] * n
    for i in range(n):
        t0 = clock()
        fn()
        out[i] = clock() - t0
    return out


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of unsorted samples."""
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return float(ordered[rank - 1])


def metric(
    name: str, samples_ns: Sequence[int], baseline_ns: Sequence[int], unit: str = "us"
) -> dict[str, Any]:
    """One metric entry; ``ratio`` is p50 over the baseline's p50 (how many trivial ops it costs)."""
    scale = UNITS_NS[unit]
    p50 = percentile(samples_ns, 50) / scale
    base = percentile(baseline_ns, 50) / scale
    return {
        "name": name,
        "unit": unit,
        "p50": round(p50, 3),
        "p99": round(percentile(samples_ns, 99) / scale, 3),
        "baseline_p50": round(base, 3),
        "ratio": round(p50 / base, 1) if base > 0 else None,
        "n": len(samples_ns),
    }


PROBE_VERSION = 1  # bump when _probe_work changes: probes of different versions do not compare


def _probe_work() -> int:
    """The fixed workload: integer arithmetic, dict writes, a sort and string formatting,
    pure Python on one core, the mix a worker's and an agent's hot paths are made of.
    Tens of milliseconds on a server core."""
    acc = 0
    table: dict[int, int] = {}
    for i in range(60_000):
        acc = (acc * 31 + i) % 1_000_003
        table[i & 4095] = acc
    ordered = sorted(table.values())
    return acc + ordered[0] + len(",".join(map(str, ordered)))


def cpu_probe(repeats: int = 15) -> dict[str, Any]:
    """The machine's speed: the fixed workload timed ``repeats`` times, in ms of wall time.

    ``cpu_probe_ms`` is the fastest run (the speed of one core as the bench got it: the
    figure to compare machines by), ``cpu_probe_p50_ms`` the median. Other work on a shared
    machine raises both (sustained load leaves no run untouched), so a probe well above the
    machine's quiet one marks a contended run. It runs in the bench's own process, while
    the bench is idle, and takes about fifteen times the workload's time.
    """
    _probe_work()  # warm up: first-call costs are not the machine's speed
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        _probe_work()
        runs.append((time.perf_counter() - t0) * 1000)
    return {
        "cpu_probe_ms": round(min(runs), 1),
        "cpu_probe_p50_ms": round(statistics.median(runs), 1),
    }


def _cpu_model() -> str:
    """The CPU's name as Linux reports it (``platform.processor()`` is empty there)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    """What a result needs beside it to be compared with one from another machine."""
    return {
        **cpu_probe(),
        "cpu_probe_version": PROBE_VERSION,
        "cpu_model": _cpu_model(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_avg_1m": round(os.getloadavg()[0], 2),  # others' work on a shared machine
    }


_DOCUMENT: list[IO[str]] = []  # where emit() writes once claim_stdout() took stdout


def claim_stdout() -> None:
    """Keep stdout for the one document: anything else written to it from now on (the
    Temporal core prints its warnings there, a retried RPC for one) goes to stderr."""
    if not _DOCUMENT:
        sys.stdout.flush()
        _DOCUMENT.append(os.fdopen(os.dup(1), "w"))
        os.dup2(2, 1)


def emit(bench: str, metrics: list[dict[str, Any]], speed: dict[str, Any] | None = None) -> str:
    """Print (and return) the bench's one JSON document, with the machine's speed beside
    the metrics: ``speed`` if the bench probed it itself, else probed now, once the bench's
    own work is done."""
    doc = json.dumps({"bench": bench, "machine": speed or machine(), "metrics": metrics})
    print(doc, file=_DOCUMENT[0] if _DOCUMENT else sys.stdout, flush=True)
    return doc
