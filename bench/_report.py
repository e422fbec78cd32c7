"""Shared by the benches: time a callable, reduce the samples, print the one JSON document.

Every bench prints exactly one document of the shape
``{"bench": NAME, "metrics": [{"name", "unit", "p50", "p99", "baseline_p50", "ratio", "n"}]}``
so that CI can compare runs. ``baseline_p50`` is a trivial operation timed in the same
run and the same way, which makes ``ratio`` comparable across machines of different speed.
"""

from __future__ import annotations

import json
import math
import os
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


_DOCUMENT: list[IO[str]] = []  # where emit() writes once claim_stdout() took stdout


def claim_stdout() -> None:
    """Keep stdout for the one document: anything else written to it from now on (the
    Temporal core prints its warnings there, a retried RPC for one) goes to stderr."""
    if not _DOCUMENT:
        sys.stdout.flush()
        _DOCUMENT.append(os.fdopen(os.dup(1), "w"))
        os.dup2(2, 1)


def emit(bench: str, metrics: list[dict[str, Any]]) -> str:
    """Print (and return) the bench's one JSON document."""
    doc = json.dumps({"bench": bench, "metrics": metrics})
    print(doc, file=_DOCUMENT[0] if _DOCUMENT else sys.stdout, flush=True)
    return doc
