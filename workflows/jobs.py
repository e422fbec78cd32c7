"""Background job groups in the call's workflow (issue 15 §1; the pure part is
``callflow/jobs.py``).

A ``jobs`` entry's ``StartJobs`` effect starts one workflow task per group: each job is a
``run_job`` activity (``activities/jobs.py``) with its own timeout and retries, and every
result, progress report, cancel and timeout goes through the group's reducer in the order
the history holds, so a replay (a worker died) reaches the same statuses and nothing is
run again. Each envelope the reducer gives is kept in a bounded log and in the transcript.

The agent reads the log (query ``jobs_feed``), adds the envelopes to the LLM's context and
the room, and routes a finished group with the ``route_jobs`` update, after its own
earlier events (``after_seq``), as a node function's result is applied: so the workflow
and the agent move on the same step. ``cancel_jobs`` is the LLM's built-in cancel (and the
caller barging in, for a group marked ``cancel_on_interruption``). The caller hanging up
and, with ``cancel_on_leave``, the flow leaving the node cancel a group here.
A group's task lives until it is routed (or the call moved on or ended): continue-as-new
waits for it, so no group straddles two runs.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError
from temporalio.exceptions import TimeoutError as ActivityTimeout

with workflow.unsafe.imports_passed_through():
    from ringflow.activities.http_tool import HttpTool, HttpToolRequest
    from ringflow.activities.jobs import TIMED_OUT, JobInput, JobOutput, JobRunner
    from ringflow.callflow.effects import JobRun, StartJobs
    from ringflow.callflow.events import JobsFinished
    from ringflow.callflow.jobs import (
        CancelGroup,
        GroupEvent,
        GroupState,
        GroupTimedOut,
        JobFinished,
        JobProgress,
        advance,
        completed_envelope,
        describe,
        group_result,
        new_group,
    )
    from ringflow.callflow.subflow_handlers import handler_module
    from ringflow.contract.events import Turn
    from ringflow.contract.updates import CallFunctionResult, CancelRequest, RouteRequest
    from ringflow.contract.wire import MAX_TEXT_CHARS, encoded_bytes
    from ringflow.workflows import activity_calls as acts
    from ringflow.workflows.call_driver import CallDriver
    from ringflow.workflows.epochs import refuse_update

LOG_MAX = 400  # envelopes kept for the agent to read; older ones are in the transcript
FEED_MAX = 100  # envelopes in one query answer
UPDATE_MAX_BYTES = 8_000  # one progress report's data
HEARTBEAT_S = 5.0  # a job's worker dying is noticed this soon, and the job retried elsewhere


@dataclass(frozen=True)
class JobFailedAnswer:
    """An HTTP job answered with an error (a 4xx, not JSON): failed, not retried."""

    error: str


class JobGroups:
    """The call's groups, their envelopes and which were routed (one per workflow run)."""

    def __init__(self) -> None:
        self.groups: dict[str, GroupState] = {}
        self.specs: dict[str, StartJobs] = {}
        self.log: list[dict[str, Any]] = []
        self.base = 0  # index of log[0] among every envelope of this run
        self.cancel_asked: dict[str, str] = {}
        self.routing: set[str] = set()
        self.routed: dict[str, CallFunctionResult] = {}
        self.arrived: tuple[str, int] | None = (
            None  # the node a group's route entered, transcript length then
        )

    def running(self) -> list[str]:
        return [gid for gid, g in self.groups.items() if not g.done]


class Jobs:
    """The workflow's side of job groups, on the call's driver: ``CallWorkflow`` routes the
    driver's ``start_jobs`` and its job messages here."""

    def __init__(self, d: CallDriver) -> None:
        self.d = d
        self.job_groups = JobGroups()

    def start_jobs(self, eff: StartJobs) -> None:
        book = self.job_groups
        if eff.group_id in book.groups:
            return
        group, started = new_group(
            eff.group_id, eff.node, eff.name, [j.name for j in eff.jobs], eff.cancel_on_error
        )
        started.update(label=eff.label, cancellable=eff.cancellable)
        book.groups[eff.group_id] = group
        book.specs[eff.group_id] = eff
        self.emit([started])
        self.d.spawn(self.run_group(eff))

    async def run_group(self, eff: StartJobs) -> None:
        gid = eff.group_id
        book = self.job_groups
        tasks = [asyncio.get_event_loop().create_task(self.run_job(eff, job)) for job in eff.jobs]

        def stop() -> str | None:
            if self.d.call.flow_state.ended:
                return "hangup"
            if eff.cancel_on_leave and self.d.call.flow_state.node != eff.node:
                return "left_node"
            return book.cancel_asked.get(gid)

        try:
            await workflow.wait_condition(
                lambda: book.groups[gid].done or stop() is not None,
                timeout=timedelta(seconds=eff.timeout_s),
            )
        except TimeoutError:
            self.feed(gid, GroupTimedOut())
        if not book.groups[gid].done and (reason := stop()) is not None:
            self.feed(gid, CancelGroup(reason=reason))
        for t in tasks:
            if not t.done():
                t.cancel()  # the activity is asked to stop; whatever it answers later is ignored
        # Held until the agent routes it (or the call moved on): see the module's docstring.
        await workflow.wait_condition(
            lambda: (
                gid in book.routed or self.d.call.flow_state.ended or self.d.call.flow_state.node != eff.node
            )
        )

    async def run_job(self, eff: StartJobs, job: JobRun) -> None:
        key = f"{self.d.inp.call_id}:{eff.group_id}:{job.name}"
        try:
            if job.http:
                out = await self.http_job(eff, job, key)
            else:
                out = await workflow.start_activity_method(
                    JobRunner.run_job,
                    self.job_input(eff, job, key),
                    start_to_close_timeout=timedelta(seconds=job.timeout_s + 5),
                    heartbeat_timeout=timedelta(seconds=HEARTBEAT_S),
                    retry_policy=acts.retry_policy(job.retry),
                    cancellation_type=workflow.ActivityCancellationType.TRY_CANCEL,
                )
        except ActivityError as exc:
            cause = exc.cause
            if isinstance(cause, CancelledError):
                return
            timed = isinstance(cause, ActivityTimeout) or (
                isinstance(cause, ApplicationError) and cause.type == TIMED_OUT
            )
            self.feed(
                eff.group_id,
                JobFinished(job=job.name, status="timed_out" if timed else "failed", error=str(cause)[:300]),
            )
            return
        if isinstance(out, JobFailedAnswer):
            self.feed(eff.group_id, JobFinished(job=job.name, status="failed", error=out.error))
            return
        self.feed(eff.group_id, JobFinished(job=job.name, status="completed", result=out.result))

    def job_input(self, eff: StartJobs, job: JobRun, key: str) -> JobInput:
        module, source = handler_module(self.d.inp.definition, eff.scope)
        return JobInput(
            call_id=self.d.inp.call_id,
            group_id=eff.group_id,
            job=job.name,
            node=eff.node,
            module=module,
            flow_source=source,
            subflow=bool(eff.scope),
            args=job.args,
            variables=self.d.call.flow_state.variables,
            state=self.d.call.handler_state,
            timeout_s=job.timeout_s,
            idempotency_key=key,
        )

    async def http_job(self, eff: StartJobs, job: JobRun, key: str) -> JobOutput | JobFailedAnswer:
        """An HTTP job: the ``http_tool`` activity renders it from the call's definition (the
        rendered headers hold credentials and never enter the history). A 5xx or a timeout
        is retried by the job's policy; an error answer (4xx, not JSON) fails the job."""
        req = HttpToolRequest(
            call_id=self.d.inp.call_id,
            seq=0,
            method=job.method,
            node=eff.node,
            entry=job.name,
            args=job.args,
            values=job.http_values or {},
            timeout_s=job.timeout_s,
            idempotency_key=key,
        )
        answer = await workflow.start_activity_method(
            HttpTool.http_tool,
            req,
            start_to_close_timeout=timedelta(seconds=job.timeout_s + 5),
            retry_policy=acts.retry_policy(job.retry),
            cancellation_type=workflow.ActivityCancellationType.TRY_CANCEL,
        )
        if isinstance(answer, dict) and answer.get("status") == "error":
            return JobFailedAnswer(error=f"{answer.get('error')}: {answer.get('message')}"[:300])
        return JobOutput(result=answer)

    def feed(self, gid: str, event: GroupEvent) -> None:
        book = self.job_groups
        group = book.groups.get(gid)
        if group is None:
            return
        book.groups[gid], envelopes = advance(group, event)
        self.emit(envelopes)

    def emit(self, envelopes: list[dict[str, Any]]) -> None:
        """Each envelope into the log the agent reads and into the transcript."""
        book = self.job_groups
        now = workflow.now().timestamp()
        for env in envelopes:
            book.log.append({**env, "n": book.base + len(book.log), "at": now})
            turn = Turn(
                role="system",
                text=describe(env)[:MAX_TEXT_CHARS],
                node=self.d.call.flow_state.node,
                started_at=now,
                ended_at=now,
            )
            self.d.transcript.add(turn)
        if len(book.log) > LOG_MAX:
            drop = len(book.log) - LOG_MAX
            book.log = book.log[drop:]
            book.base += drop
        if envelopes:
            self.d.wake = True

    # --- messages ---------------------------------------------------------------------
    def on_job_update(self, data: Any) -> None:
        """A job's progress (``flow_manager.update``), sent by its activity."""
        if not isinstance(data, dict):
            return
        gid, job = data.get("group_id"), data.get("job")
        if not isinstance(gid, str) or not isinstance(job, str) or gid not in self.job_groups.groups:
            return
        update = data.get("data")
        if encoded_bytes(update) > UPDATE_MAX_BYTES:
            update = {"note": f"progress of more than {UPDATE_MAX_BYTES} bytes left out"}
        self.feed(gid, JobProgress(job=job, data=update))

    def jobs_feed(self, *args: Any) -> dict[str, Any]:
        """Envelopes from index ``args[0]`` (none for a negative one: an agent that only
        wants to know where the log is), the groups running, and the finished groups still
        to route on the node the call is on."""
        book = self.job_groups
        after = args[0] if args and type(args[0]) is int else -1
        items = book.log[max(0, after - book.base) :][:FEED_MAX] if after >= 0 else []
        end = items[-1]["n"] + 1 if items else max(after, book.base + len(book.log) if after < 0 else after)
        running = book.running()
        return {
            "run": workflow.info().run_id,  # a new run (continue-as-new) starts a new log
            "unspoken": self.unspoken(),
            "next": end,
            "envelopes": items,
            "running": running,
            "cancellable": [g for g in running if book.specs[g].cancellable],
            "interruptible": [g for g in running if book.specs[g].cancel_on_interruption],
            "unrouted": [
                {**completed_envelope(g), "result": group_result(g)}
                for gid, g in book.groups.items()
                if g.done
                and gid not in book.routed
                and not self.d.call.flow_state.ended
                and self.d.call.flow_state.node == g.node
            ],
        }

    def unspoken(self) -> str | None:
        """The node a group's route entered, while the call is there and nothing was said on
        it yet: an agent that died right after routing left its greeting unsaid, and the
        agent taking over says it (``agents/jobs.py``)."""
        arrived = self.job_groups.arrived
        if arrived is None or self.d.call.flow_state.ended or self.d.call.flow_state.node != arrived[0]:
            return None
        node, at = arrived
        said = any(t.role == "assistant" and t.node == node for t in self.d.transcript.turns[at:])
        return None if said else node

    async def route_jobs(self, req: RouteRequest) -> CallFunctionResult:
        """A finished group's result into the state, and its ``transition_to``, once the
        agent's events before it are in. Asked again (a new agent), answered again."""
        book = self.job_groups
        if req.group_id in book.routing:
            await workflow.wait_condition(lambda: req.group_id in book.routed)
        if req.group_id in book.routed:
            return book.routed[req.group_id]
        book.routing.add(req.group_id)
        try:
            await self.d.caught_up(req.after_seq)
            refuse_update(self.d, "route_jobs", req.epoch)  # its agent replaced while it waited
            group = book.groups[req.group_id]
            step = self.d.step(
                JobsFinished(
                    group_id=group.group_id,
                    node=group.node,
                    name=group.name,
                    result=group_result(group),
                    at=workflow.now().timestamp(),
                )
            )
            out = self.d.function_result(step.effects)
            book.routed[req.group_id] = out
            if out.decision == "transition" and out.node is not None:
                book.arrived = (out.node, len(self.d.transcript.turns))
        finally:
            book.routing.discard(req.group_id)
        self.d.seen_agent()
        return out

    def validate_route_jobs(self, req: RouteRequest) -> None:
        group = self.job_groups.groups.get(req.group_id) if isinstance(req, RouteRequest) else None
        if group is None or not group.done:
            raise ValueError("no finished job group by that id")

    async def cancel_jobs(self, req: CancelRequest) -> dict[str, Any]:
        """Cancel running groups (the LLM's ``cancel_jobs``, or the caller barging in on a
        group marked ``cancel_on_interruption``); answered once they have ended."""
        book = self.job_groups
        allowed = [
            g
            for g in book.running()
            if (book.specs[g].cancellable if req.reason == "llm" else book.specs[g].cancel_on_interruption)
        ]
        asked = [g for g in allowed if not req.group_ids or g in req.group_ids]
        for gid in asked:
            book.cancel_asked.setdefault(gid, req.reason)
        if asked:
            await workflow.wait_condition(lambda: all(book.groups[g].done for g in asked))
        self.d.seen_agent()
        return {
            "status": "cancelled" if asked else "nothing to cancel",
            "groups": {g: book.groups[g].outcome for g in asked},
        }

    def validate_cancel_jobs(self, req: CancelRequest) -> None:
        if not isinstance(req, CancelRequest):
            raise ValueError("cancel_jobs takes one CancelRequest (JSON)")
