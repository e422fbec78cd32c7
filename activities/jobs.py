"""One job of a background group (``jobs:`` entries, issue 15 §1): a handler run as a
normal activity, so a worker dying mid-job hands it to another worker (it heartbeats, so
that is noticed within seconds) instead of losing it.

A job is run at least once by Temporal; its ``flow_manager.idempotency_key``
(``<call id>:<group id>:<job>``, the same on every attempt) lets its back end do it once.
A handler's exception or timeout is raised to Temporal, so the job's own ``retry``
policy applies; the workflow maps the last failure to ``failed`` or ``timed_out``.
Progress (``await flow_manager.update(data)``) goes to the call's workflow as a
``job_update`` signal. The handler's writes to ``flow_manager.state`` are not kept (jobs
run side by side): its result is, under the entry's name in the call's state.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from temporalio import activity
from temporalio.exceptions import ApplicationError

from ringflow.activities.handler_run import HandlerInput, call_handler, heartbeats, parse_flow_dirs
from ringflow.activities.metrics import timed

log = logging.getLogger(__name__)
JOB_UPDATE_SIGNAL = "job_update"
TIMED_OUT = "JobTimedOut"  # the ApplicationError type of a handler that ran out of time


class JobInput(BaseModel):
    call_id: str
    group_id: str
    job: str
    node: str
    module: str
    flow_source: str | None = None
    subflow: bool = False  # a used flow's module (``HandlerInput.subflow``)
    args: dict[str, Any] = {}
    variables: dict[str, Any] = {}
    state: dict[str, Any] = {}
    timeout_s: float = 30
    idempotency_key: str = ""


class JobOutput(BaseModel):
    result: Any = None


# Stand-ins for jobs by call id (``ringflow call simulate`` plays a script's ``jobs:`` with
# them): a registered call's jobs go to its double, given the progress reporter and the real
# run (for the jobs the script leaves to their handlers).
Double = Callable[
    [JobInput, Callable[[Any], Awaitable[None]], Callable[[], Awaitable[JobOutput]]], Awaitable[JobOutput]
]
DOUBLES: dict[str, Double] = {}


class JobRunner:
    """The ``run_job`` activity, bound to the worker's flow directories."""

    def __init__(self, flow_dirs: str | Sequence[str | Path] | None = None) -> None:
        self.flow_dirs = parse_flow_dirs(flow_dirs)

    @activity.defn(name="run_job")
    async def run_job(self, inp: JobInput) -> JobOutput:
        info = activity.info()

        async def progress(data: Any) -> None:
            try:
                handle = activity.client().get_workflow_handle(info.workflow_id or "")
                await handle.signal(
                    JOB_UPDATE_SIGNAL, {"group_id": inp.group_id, "job": inp.job, "data": data}
                )
            except Exception as exc:  # progress is a courtesy: the job goes on without it
                log.warning("job %s: progress not delivered (%s)", inp.job, type(exc).__name__)

        async def real() -> JobOutput:
            hout = await call_handler(_as_handler(inp), self.flow_dirs, progress=progress)
            if hout.error is not None:
                kind = TIMED_OUT if "timed out after" in hout.error else "JobFailed"
                raise ApplicationError(hout.error[:500], type=kind)
            return JobOutput(result=hout.result)

        beat = heartbeats()
        try:
            with timed("function", "job") as outcome:
                double = DOUBLES.get(inp.call_id)
                out = await (double(inp, progress, real) if double is not None else real())
                outcome["ok"] = True
                return out
        finally:
            beat.cancel()


def _as_handler(inp: JobInput) -> HandlerInput:
    return HandlerInput(
        call_id=inp.call_id,
        node=inp.node,
        name=inp.job,
        module=inp.module,
        flow_source=inp.flow_source,
        subflow=inp.subflow,
        args=inp.args,
        variables=inp.variables,
        state=inp.state,
        timeout_s=inp.timeout_s,
        idempotency_key=inp.idempotency_key,
    )
