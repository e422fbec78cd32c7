"""Ringflow's own activity metrics, through the SDK's meter (exported with the SDK's metrics).

Names follow Prometheus conventions: the exporter adds ``_total`` to counters; histogram
names carry their unit (``_seconds``) themselves.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from temporalio import activity


@contextmanager
def timed(what: str, kind: str) -> Iterator[dict[str, bool]]:
    """Count a run of ``what`` (``function`` or ``extraction``) and observe its duration.

    The caller sets ``outcome["ok"] = False`` for a run that failed without raising.
    """
    outcome = {"ok": True}
    start = time.perf_counter()
    try:
        yield outcome
    except BaseException:
        outcome["ok"] = False
        raise
    finally:
        if activity.in_activity():
            meter = activity.metric_meter()
            attrs = {"kind": kind, "outcome": "ok" if outcome["ok"] else "error"}
            runs = meter.create_counter(f"ringflow_{what}_runs", f"{what.capitalize()} runs, by outcome.")
            runs.add(1, attrs)
            meter.create_histogram_float(
                f"ringflow_{what}_duration_seconds", f"{what.capitalize()} run time.", "seconds"
            ).record(time.perf_counter() - start, attrs)
            if not outcome["ok"] and what == "extraction":
                meter.create_counter("ringflow_extraction_errors", "Extraction attempts that failed.").add(
                    1, {"kind": kind}
                )
