"""The agent and the workflow agree after every step, over 10,000 generated calls.

The property of ``tests/test_agreement.py`` (the model in ``tests/agreement.py``: both
sides on the real engine, extractions finishing early, late, failing and never, node
functions, action nodes, job routes, agent kills, continue-as-new) run for 10,000 examples
(``RINGFLOW_BENCH_SHORT=1``: 200; ``RINGFLOW_AGREEMENT_EXAMPLES`` sets any other count).
A divergence fails the run with the step and both states. Metrics: ``example`` (one
generated flow and call, checked after every step) against the baseline of starting that
call's engine alone, and ``divergences`` (the target is 0). Run:
``.venv/bin/python bench/agreement.py``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ringflow.callflow.engine import Engine
from tests.support import agreement
from tests.support import engine_flows as ef

try:
    from _report import emit, metric
except ImportError:  # run as ``python -m bench.agreement``
    from bench._report import emit, metric

SHORT = os.environ.get("RINGFLOW_BENCH_SHORT") == "1"
EXAMPLES = int(os.environ.get("RINGFLOW_AGREEMENT_EXAMPLES", "200" if SHORT else "10000"))


def main() -> None:
    played: list[int] = []
    started: list[int] = []
    steps: list[int] = []

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(ef.flows(), st.data())
    def check(flow: ef.Data, data: st.DataObject) -> None:
        t0 = time.perf_counter_ns()
        sides = agreement.play(data, flow)
        played.append(time.perf_counter_ns() - t0)
        steps.append(len(sides.log))
        t0 = time.perf_counter_ns()
        Engine(sides.eng.definition).start(agreement.START)
        started.append(time.perf_counter_ns() - t0)

    divergences = 0
    try:
        check()
    except AssertionError as exc:
        divergences = 1
        print(exc, file=sys.stderr)
    example = metric("example", played, started, unit="ms")
    example.update(examples=len(played), steps=sum(steps))
    emit(
        "agreement",
        [
            example,
            {"name": "divergences", "unit": "count", "p50": divergences, "p99": divergences,
             "baseline_p50": 0, "ratio": None, "n": len(played), "target": 0, "met": divergences == 0},
        ],
    )  # fmt: skip
    if divergences:
        sys.exit(1)


if __name__ == "__main__":
    main()
