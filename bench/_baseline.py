"""The minimal raw Temporal workflow the workflow bench compares CallWorkflow against.

It does the least a workflow can do for each measured operation (count a signal; run
one no-op local activity from an update; echo an update), so ``ratio`` in the bench is
the cost of Ringflow's own work: the engine, the inbox, visibility, payload sizes.
It lives in its own module (not in the bench script) because the workflow sandbox
re-imports a workflow's module, which it cannot do for ``__main__``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import activity, workflow


@activity.defn(name="bench_noop")
async def bench_noop(arg: dict[str, Any]) -> dict[str, Any]:
    """The baseline's stand-in for a flow's no-op handler."""
    return {}


@workflow.defn(name="BenchBaseline")
class BenchBaseline:
    def __init__(self) -> None:
        self.count = 0
        self.done = False

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: self.done)
        return self.count

    @workflow.signal
    def bump(self, arg: dict[str, Any]) -> None:
        self.count += 1

    @workflow.signal
    def stop(self) -> None:
        self.done = True

    @workflow.query
    def applied(self) -> int:
        return self.count

    @workflow.update
    async def call(self, arg: dict[str, Any]) -> dict[str, Any]:
        """Same durable work as call_function with a no-op handler: one local activity."""
        return await workflow.execute_local_activity(
            "bench_noop", arg, result_type=dict, start_to_close_timeout=timedelta(seconds=2)
        )

    @workflow.update
    def echo(self, arg: dict[str, Any]) -> dict[str, Any]:
        return arg


@workflow.defn(name="LoadBaseline")
class LoadBaseline:
    """bench/load.py's raw design: every agent event is its own signal, appended to a list.
    Nothing else: no inbox, no engine, no timers, no search attributes."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.done = False

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: self.done)
        return len(self.events)

    @workflow.signal
    def event(self, arg: dict[str, Any]) -> None:
        self.events.append(arg)

    @workflow.signal
    def stop(self) -> None:
        self.done = True
