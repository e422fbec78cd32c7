"""A script's ``jobs:`` (background job groups) in ``ringflow call simulate``.

Script time, not wall time: it starts at 0 and only a ``silence: N`` turn moves it (by N
seconds); a caller's turn takes none. A job the script lists finishes ``after_s`` script
seconds after it started, reporting its ``progress`` items first, with its ``result``, or
failing with its ``error`` (``status: timed_out`` for a job that ran out of time). A job the
script leaves out runs its real handler. After every turn the simulator waits until nothing
can happen without script time passing: each running job waits on the clock, and the
agent has read, said and routed everything the workflow reported. So a script plays the
same way on any machine, and jobs still running when the script ends are cancelled by
the caller hanging up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from temporalio.exceptions import ApplicationError

from ringflow.activities.jobs import DOUBLES, TIMED_OUT, JobInput, JobOutput

SETTLE_TIMEOUT_S = 60.0
CHECK_S = 0.05


class ScriptJob(BaseModel):
    model_config = ConfigDict(extra="forbid")

    after_s: float = Field(0, ge=0)
    result: Any = None
    error: str | None = None
    status: Literal["completed", "failed", "timed_out"] | None = None  # default: failed with an error
    progress: list[Any] = []  # job_update data, reported when the job starts

    @model_validator(mode="after")
    def _consistent(self) -> ScriptJob:
        if self.status == "completed" and self.error is not None:
            raise ValueError("a completed job has a result, not an error")
        return self


class ScriptedJobs:
    """One call's scripted jobs: the ``run_job`` double and the script clock."""

    def __init__(self, call_id: str, jobs: dict[str, ScriptJob]) -> None:
        self.call_id = call_id
        self.jobs = jobs
        self.clock = 0.0
        self.tick = asyncio.Event()
        self.played: set[int] = set()  # silence turns whose time has passed
        self.blocked: dict[str, float] = {}  # "<group>/<job>" waiting on the clock, until then

    def open(self) -> None:
        DOUBLES[self.call_id] = self.double

    def close(self) -> None:
        DOUBLES.pop(self.call_id, None)

    async def double(
        self,
        inp: JobInput,
        progress: Callable[[Any], Awaitable[None]],
        real: Callable[[], Awaitable[JobOutput]],
    ) -> JobOutput:
        script = self.jobs.get(inp.job)
        if script is None:
            return await real()
        key = f"{inp.group_id}/{inp.job}"
        due = self.blocked.setdefault(key, self.clock + script.after_s)  # a retried attempt keeps it
        for item in script.progress:
            await progress(item)
        while self.clock < due:
            await self.tick.wait()
        status = script.status or ("failed" if script.error is not None else "completed")
        if status == "completed":
            return JobOutput(result=script.result)
        kind = TIMED_OUT if status == "timed_out" else "JobFailed"
        raise ApplicationError(script.error or status, type=kind, non_retryable=True)

    def advance(self, seconds: float) -> None:
        self.clock += seconds
        self.tick.set()
        self.tick = asyncio.Event()

    async def settle(self, run: Any) -> None:
        """Wait until only script time can move the jobs on (see the module's docstring):
        twice in a row, with the session idle in between (a route may start more)."""
        feed = run.controller.jobs
        if feed is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETTLE_TIMEOUT_S
        calm = 0
        while calm < 2 and loop.time() < deadline and not run.controller.ended:
            if await self.calm(run.call.handle, feed):
                calm += 1
                await run.session.wait_for_idle()
            else:
                calm = 0
                await asyncio.sleep(CHECK_S)
        await run.session.wait_for_idle()

    async def calm(self, handle: Any, feed: Any) -> bool:
        state = await handle.query("jobs_feed", -1)
        if feed.cursor < state["next"] or state["unrouted"] or feed.unrouted or feed.poke.is_set():
            return False
        return not state["running"] or self.waiting_jobs(state, await _all_envelopes(handle))

    def waiting_jobs(self, state: dict[str, Any], log: list[dict[str, Any]]) -> bool:
        """Every job of a running group is waiting on the script clock (none can finish now)."""
        running = set(state["running"])
        pending: set[str] = set()
        for env in log:
            if env["group_id"] not in running:
                continue
            if env["type"] == "group_started":
                pending |= {f"{env['group_id']}/{j}" for j in env["jobs"]}
            elif env["type"] == "job_completed":
                pending.discard(f"{env['group_id']}/{env['job']}")
        return bool(pending) and all(k in self.blocked and self.blocked[k] > self.clock for k in pending)


async def _all_envelopes(handle: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    after = 0
    while True:
        page = await handle.query("jobs_feed", after)
        out += page["envelopes"]
        if not page["envelopes"]:
            return out
        after = page["next"]


async def after_turn(jobs: ScriptedJobs, run: Any, turn: Any, index: int) -> None:
    """A turn played: a silence moves script time on (once, even when the turn is played
    again after a kill); then wait for the call to settle."""
    if run.controller.jobs is None:
        return
    if turn.silence is not None and index not in jobs.played:
        jobs.played.add(index)
        # due times in order, settling at each: jobs finish one after another, as scripted
        target = jobs.clock + turn.silence
        await jobs.settle(run)
        for due in sorted({d for d in jobs.blocked.values() if jobs.clock < d <= target}):
            jobs.advance(due - jobs.clock)
            await jobs.settle(run)
        jobs.advance(target - jobs.clock)
    await jobs.settle(run)
