"""The worker's collector pauses over a window, read from its Prometheus endpoint
(``ringflow_worker_gc_pause_seconds``, workflows/heap.py); imported by bench/load.py."""

from __future__ import annotations

import math
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from ringflow.workflows.heap import GC_PAUSE_METRIC


def scrape(url: str) -> dict[str, dict[str, float]]:
    """``{generation: {"count", "sum", "le:<bound>"...}}``, the histogram as exported now."""
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != GC_PAUSE_METRIC:
            continue
        for s in family.samples:
            gen = out.setdefault(s.labels.get("generation", "?"), {})
            if s.name.endswith("_bucket"):
                gen[f"le:{s.labels['le']}"] = s.value
            elif s.name.endswith("_count"):
                gen["count"] = s.value
            elif s.name.endswith("_sum"):
                gen["sum"] = s.value
    return out


def window(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Full collections (generation 2) between two scrapes: how many, their mean, and the
    bucket bound under which the longest one fell (``inf`` past the last bucket)."""
    b, a = before.get("2", {}), after.get("2", {})
    count = a.get("count", 0.0) - b.get("count", 0.0)
    total = a.get("sum", 0.0) - b.get("sum", 0.0)
    bounds = sorted((float(k[3:]), a[k] - b.get(k, 0.0)) for k in a if k.startswith("le:") and k != "le:+Inf")
    longest = math.inf
    for bound, n in bounds:
        if n >= count:
            longest = bound
            break
    return {
        "gc_full_count": int(count),
        "gc_full_mean_ms": round(total / count * 1000, 1) if count else None,
        "gc_full_max_le_ms": (round(longest * 1000) if longest != math.inf else "inf") if count else None,
    }
