"""Background job groups (issue 15 §1): the ``jobs:`` entry's format and the group's state.

A ``jobs`` function entry starts a *group* of jobs that run in parallel while the
conversation goes on; the LLM is answered at once. The group's life is a pure reducer,
``advance(group, event) -> (group, envelopes)``, so the workflow (which feeds it the
jobs' results in the order its history holds) and the tests (which feed it every order
there is) get the same end states from the same events: the first final word about a
job wins, anything later about it is ignored, and the group's outcome is a function of
the jobs' final statuses alone.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from ringflow.callflow.effects import JobRun, StartJobs, ToolResponse
from ringflow.callflow.http_render import referenced_values
from ringflow.callflow.model import BranchTable, FlowDefinition, HandlerSpec, Transition
from ringflow.callflow.subflow_handlers import handler_key

if TYPE_CHECKING:  # the compiled flow (and jsonschema with it) is the engine's: the validator
    # reads this module's names without compiling anything (tests/ringflow/test_cli_startup.py)
    from ringflow.callflow.compiled import CompiledFunction

JobStatus = Literal["running", "completed", "failed", "cancelled", "timed_out"]
FinalStatus = Literal["completed", "failed", "cancelled", "timed_out"]
Outcome = Literal["completed", "partial", "failed", "cancelled"]
OUTCOMES: tuple[str, ...] = ("completed", "partial", "failed", "cancelled")
CANCEL_TOOL = "cancel_jobs"  # the built-in function offered while a cancellable group runs
ROOM_TOPIC = "ringflow.jobs"  # LiveKit data messages: one JSON envelope each
JOBS_PREFIX = "[jobs] "  # envelopes as text: transcript turns and the LLM's context notes
MAX_RESULT_CHARS = 4000
_NO_SPEC = HandlerSpec(
    description="", parameters={}
)  # a job's result as kept in the call's state and the LLM's context


class JobState(BaseModel):
    model_config = ConfigDict(frozen=True)

    status: JobStatus = "running"
    result: Any = None
    error: str | None = None


class GroupState(BaseModel):
    """One group as the workflow keeps it (and as ``group_completed`` reports it)."""

    model_config = ConfigDict(frozen=True)

    group_id: str
    node: str
    name: str  # the function entry that started it
    jobs: dict[str, JobState]
    cancel_on_error: bool = False
    cancelled: str | None = None  # why the group was cancelled (llm, hangup, left_node, interruption)
    done: bool = False
    outcome: Outcome | None = None


class JobFinished(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: Literal["finished"] = "finished"
    job: str
    status: FinalStatus
    result: Any = None
    error: str | None = None


class JobProgress(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: Literal["progress"] = "progress"
    job: str
    data: Any = None


class CancelGroup(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: Literal["cancel"] = "cancel"
    reason: str = "llm"


class GroupTimedOut(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: Literal["timeout"] = "timeout"


GroupEvent = JobFinished | JobProgress | CancelGroup | GroupTimedOut


def new_group(
    group_id: str, node: str, name: str, jobs: list[str], cancel_on_error: bool = False
) -> tuple[GroupState, dict[str, Any]]:
    group = GroupState(
        group_id=group_id,
        node=node,
        name=name,
        jobs={j: JobState() for j in jobs},
        cancel_on_error=cancel_on_error,
    )
    started = {"type": "group_started", "group_id": group_id, "node": node, "name": name, "jobs": list(jobs)}
    return group, started


def outcome_of(jobs: dict[str, JobState], cancelled: str | None) -> Outcome:
    """Every job completed: ``completed``; cancelled before that: ``cancelled``; else some
    completed: ``partial``; none: ``failed`` (timed out counts as failed)."""
    done = sum(1 for j in jobs.values() if j.status == "completed")
    if done == len(jobs):
        return "completed"
    if cancelled is not None:
        return "cancelled"
    return "partial" if done else "failed"


def advance(group: GroupState, event: GroupEvent) -> tuple[GroupState, list[dict[str, Any]]]:
    """The group after ``event`` and the envelopes it produced. A finished group, and a job
    already final, ignore what comes later (a late result, a second cancel)."""
    if group.done:
        return group, []
    gid = group.group_id
    jobs = dict(group.jobs)
    out: list[dict[str, Any]] = []
    cancelled = group.cancelled

    def finish(name: str, status: FinalStatus, result: Any = None, error: str | None = None) -> None:
        jobs[name] = JobState(status=status, result=result, error=error)
        env: dict[str, Any] = {"type": "job_completed", "group_id": gid, "job": name, "status": status}
        if status == "completed":
            env["result"] = result
        elif error is not None:
            env["error"] = error
        out.append(env)

    def stop_running(status: FinalStatus, error: str) -> None:
        for name in group.jobs:  # spec order: the envelopes' order is fixed
            if jobs[name].status == "running":
                finish(name, status, error=error)

    if isinstance(event, JobProgress):
        if event.job in jobs and jobs[event.job].status == "running":
            out.append({"type": "job_update", "group_id": gid, "job": event.job, "data": event.data})
        return group, out
    if isinstance(event, JobFinished):
        if event.job not in jobs or jobs[event.job].status != "running":
            return group, []
        finish(event.job, event.status, event.result, event.error)
        if group.cancel_on_error and event.status in ("failed", "timed_out"):
            stop_running("cancelled", f"cancelled: {event.job} {event.status}")
    elif isinstance(event, CancelGroup):
        cancelled = event.reason
        stop_running("cancelled", f"cancelled ({event.reason})")
    elif isinstance(event, GroupTimedOut):
        stop_running("timed_out", "the group's time ran out")
    nxt = group.model_copy(update={"jobs": jobs, "cancelled": cancelled})
    if any(j.status == "running" for j in jobs.values()):
        return nxt, out
    outcome = outcome_of(jobs, cancelled)
    nxt = nxt.model_copy(update={"done": True, "outcome": outcome})
    out.append(completed_envelope(nxt))
    return nxt, out


def completed_envelope(group: GroupState) -> dict[str, Any]:
    return {
        "type": "group_completed",
        "group_id": group.group_id,
        "node": group.node,
        "name": group.name,
        "outcome": group.outcome,
        "jobs": {k: j.status for k, j in group.jobs.items()},
    }


def group_result(group: GroupState) -> dict[str, Any]:
    """What the flow sees once the group is done: ``state[<entry name>]`` and the mapping
    ``transition_to``'s branch table reads (``field: outcome``)."""
    jobs: dict[str, Any] = {}
    for name, job in group.jobs.items():
        item: dict[str, Any] = {"status": job.status}
        if job.status == "completed":
            item["result"] = job.result
        elif job.error is not None:
            item["error"] = job.error[:300]
        jobs[name] = item
    return {"group_id": group.group_id, "outcome": group.outcome, "jobs": jobs}


def describe(env: dict[str, Any]) -> str:
    """An envelope as one line of text: the LLM's context and the call's transcript."""
    kind = env.get("type")
    gid = env.get("group_id")
    if kind == "group_started":
        label = f" ({env['label']})" if env.get("label") else ""
        return f"{JOBS_PREFIX}group {gid}{label} started: {', '.join(env.get('jobs') or [])}"
    if kind == "job_update":
        return f"{JOBS_PREFIX}{gid}/{env.get('job')} progress: {_short(env.get('data'))}"
    if kind == "job_completed":
        detail = env.get("result") if env.get("status") == "completed" else env.get("error")
        return f"{JOBS_PREFIX}{gid}/{env.get('job')} {env.get('status')}: {_short(detail)}"
    if kind == "group_completed":
        statuses = ", ".join(f"{k} {v}" for k, v in (env.get("jobs") or {}).items())
        return f"{JOBS_PREFIX}group {gid} {env.get('outcome')}: {statuses}"
    return f"{JOBS_PREFIX}{_short(env)}"


def _short(value: Any) -> str:
    try:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = str(value)
    return text if len(text) <= MAX_RESULT_CHARS else text[: MAX_RESULT_CHARS - 3] + "..."


def start_effect(
    definition: FlowDefinition,
    fn: CompiledFunction,
    node: str,
    args: dict[str, Any],
    seq: int,
    values: dict[str, Any],
) -> tuple[StartJobs, ToolResponse]:
    """What a ``jobs`` entry called by the LLM orders (the group, numbered by the state's
    ``seq`` so every engine names it alike) and what the LLM is told at once. Each job
    gets the LLM's arguments its handler declares, then its own ``args``."""
    spec = fn.entry.jobs
    assert spec is not None
    group_id = f"{fn.entry.name}-{seq}"
    runs = []
    for job in spec.run:
        timeout = job.timeout_s or (job.http.timeout_s if job.http is not None else None) or spec.timeout_s
        if job.http is not None:  # the request's templates take every argument
            runs.append(
                JobRun(
                    name=job.name,
                    args={**args, **job.args},
                    timeout_s=timeout,
                    retry=job.retry,
                    http=True,
                    method=job.http.method,
                    http_values=referenced_values(job.http, values),
                )
            )
            continue
        declared = (definition.handlers.get(handler_key(fn.scope, job.name)) or _NO_SPEC).parameters.get(
            "properties"
        ) or {}
        runs.append(
            JobRun(
                name=job.name,
                args={**{k: v for k, v in args.items() if k in declared}, **job.args},
                timeout_s=timeout,
                retry=job.retry,
            )
        )
    eff = StartJobs(
        group_id=group_id,
        node=node,
        name=fn.entry.name,
        jobs=runs,
        timeout_s=spec.timeout_s,
        cancel_on_error=spec.cancel_on_error,
        cancellable=spec.cancellable,
        cancel_on_leave=spec.cancel_on_leave,
        cancel_on_interruption=fn.cancel_on_interruption,
        label=spec.label,
        scope=fn.scope,
    )
    answer = {"group_id": group_id, "status": "started", "jobs": [j.name for j in spec.run]}
    if spec.label:
        answer["label"] = spec.label
    return eff, ToolResponse(name=fn.entry.name, result=answer)


def routes(t: Transition | None, outcome: Any) -> bool:
    """A cancelled group routes only where its table names ``cancelled`` itself: whoever
    cancelled it (the LLM, the caller) decided what comes next, not the default."""
    if outcome != "cancelled":
        return t is not None
    return isinstance(t, BranchTable) and t.field == "outcome" and "cancelled" in t.cases
