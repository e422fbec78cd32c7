"""The worker's heap: settled at start, and its collector's pauses measured.

A worker holds every live call in its sticky cache, and CPython's cycle collector stops
every thread while it walks the objects it tracks. A full collection over a thousand
cached calls is the longest stall a workflow task can meet: no signal is applied while it
runs. So its length is exported (``ringflow_worker_gc_pause_seconds``, by generation) for
ops to watch and for ``bench/load.py`` to report beside the lag it causes.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from temporalio.common import MetricHistogramFloat, MetricMeter

GC_PAUSE_METRIC = "ringflow_worker_gc_pause_seconds"
# Prometheus buckets for it: a young collection takes well under a millisecond, a full one
# over a big cache tens to hundreds.
GC_PAUSE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0)
# Tracked allocations between young collections in a worker (CPython's default is 700):
# see settle_heap.
YOUNG_THRESHOLD = 20_000


def settle_heap() -> None:
    """Move what is alive now (the imported modules, the settings: ~200,000 objects, most
    of the worker's heap) out of the collector's reach. A full collection walks every
    object the collector tracks; over the whole heap it took 110-180 ms of CPU, several
    times a call, and seconds of wall time on a loaded machine. Workflow code runs on a
    thread of this process, and the SDK fails any workflow task that takes over 2 s of
    wall time (``_DeadlockError``): a collection in the middle of one may push it there,
    however little the workflow does. Frozen, a full collection walks only what came
    since (a tenth of the time and less).

    Then the young generation is made larger (``YOUNG_THRESHOLD`` tracked allocations
    between young collections instead of CPython's 700). At a thousand cached calls the
    worker runs some 60 workflow tasks a second; with the default, a young collection falls
    inside nearly every task, and whatever the tasks in flight hold then survives into
    the old generation and dies there. That garbage is what
    triggers full collections (CPython 3.11 runs one when the old generation has grown by a
    quarter): four in a 180 s window at 1,250 calls, 410 ms each, every workflow task
    waiting behind them. With a larger young generation most temporaries are gone before a
    collection looks at them, and a young collection still walks no more than
    ``YOUNG_THRESHOLD`` new objects (its pauses are in ``ringflow_worker_gc_pause_seconds``)."""
    gc.collect()
    gc.freeze()
    young, middle, old = gc.get_threshold()
    gc.set_threshold(max(YOUNG_THRESHOLD, young), middle, old)


class GcPauses:
    """Records each collection's wall time into a histogram, from ``gc.callbacks``.

    The callback runs on whichever thread triggered the collection, with the GIL held:
    it only reads the clock and records, so it adds nothing measurable to the pause.
    """

    def __init__(self, meter: MetricMeter) -> None:
        self._hist: MetricHistogramFloat = meter.create_histogram_float(
            GC_PAUSE_METRIC, "Wall time of the worker's cycle-collector runs, by generation.", "seconds"
        )
        self._attrs = [{"generation": str(g)} for g in range(3)]
        self._started = 0.0

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        took = time.perf_counter() - self._started
        self._hist.record(took, self._attrs[min(int(info.get("generation", 2)), 2)])

    def install(self) -> GcPauses:
        if self._on_gc not in gc.callbacks:
            gc.callbacks.append(self._on_gc)
        return self

    def remove(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
