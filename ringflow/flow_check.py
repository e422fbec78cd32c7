"""``flow check``: recorded calls read back as their engine's inputs, for a new version.

Each call's history (every run of it) is replayed with Temporal's ``Replayer`` on the
worker's own ``CallWorkflow`` code, through the same data converter (keys, flow versions),
and every event its engine applied is captured with the engine's answer. Replaying is the
exact account: the inputs are the ones the workflow derived from the agent's signals and
updates and from the results of the work it ran, in its order, so no second reading of a
history's events can drift from the workflow's. ``callflow/check.py`` then runs those
inputs through the new version and compares.

The capture wraps ``Engine.apply`` for the length of one replay in this process (``flow
check`` runs in the CLI, never on a worker), then puts it back.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel, ValidationError
from temporalio.client import Client
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner

from ringflow.callflow.check import CallCheck, RecordedStep, check_call
from ringflow.callflow.engine import Engine, Step
from ringflow.callflow.events import EVENT_ADAPTER
from ringflow.callflow.model import FlowDefinition
from ringflow.callflow.state import CallState
from ringflow.contract.call import CallInput
from ringflow.contract.ids import CALL_WORKFLOW_PREFIX

ENDED = "WorkflowType = 'CallWorkflow' AND RingflowStatus = 'ended'"
MAX_CALLS = 1000  # a check is a regression test, not an export


class CheckError(RuntimeError):
    """A call that cannot be read back; the message says which and why."""


def selection(query: str | None, last: int | None, flow: str | None) -> str:
    """The visibility query of the ended calls to check."""
    if query:
        return f"{ENDED} AND ({query})"
    if flow is None:
        raise CheckError("--last N needs --flow NAME")
    return f"{ENDED} AND RingflowFlow = '{flow}'"


@contextmanager
def _capturing() -> Iterator[list[RecordedStep]]:
    got: list[RecordedStep] = []
    original = Engine.apply

    def apply(self: Engine, state: CallState, event: Any) -> Step:
        step = original(self, state, event)
        try:
            ev = EVENT_ADAPTER.validate_python(
                event if not isinstance(event, BaseModel) else event.model_dump()
            )
        except ValidationError:
            return step  # refused as malformed: it changed nothing
        got.append(RecordedStep(ev, list(step.effects), step.state))
        return step

    Engine.apply = apply  # type: ignore[method-assign]
    try:
        yield got
    finally:
        Engine.apply = original  # type: ignore[method-assign]


async def recorded_call(client: Client, workflow_id: str) -> tuple[FlowDefinition, list[RecordedStep]]:
    """The definition a call ran and its engine's inputs, across every run of it."""
    from ringflow.workflows.call import CallWorkflow

    runs = [wf async for wf in client.list_workflows(f"WorkflowId = '{workflow_id}'")]
    runs.sort(key=lambda wf: wf.start_time)
    if not runs:
        raise CheckError(f"call {workflow_id.removeprefix(CALL_WORKFLOW_PREFIX)}: no history found")
    replayer = Replayer(
        workflows=[CallWorkflow],
        data_converter=client.data_converter,
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    definition: FlowDefinition | None = None
    steps: list[RecordedStep] = []
    for run in runs:
        history = await client.get_workflow_handle(workflow_id, run_id=run.run_id).fetch_history()
        if definition is None:
            started = history.events[0].workflow_execution_started_event_attributes.input.payloads
            (inp,) = await client.data_converter.decode(list(started), [CallInput])
            definition = inp.definition
        with _capturing() as got:
            result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        if result.replay_failure is not None:
            raise CheckError(
                f"call {workflow_id.removeprefix(CALL_WORKFLOW_PREFIX)}: its history does not replay on "
                f"this code: {str(result.replay_failure)[:300]}"
            )
        steps += got
    assert definition is not None
    return definition, steps


async def check_calls(
    client: Client, new: FlowDefinition, query: str, limit: int
) -> tuple[list[CallCheck], list[str]]:
    """Each selected call checked against ``new``; the calls that could not be read, and why."""
    ids: list[str] = []
    async for wf in client.list_workflows(query):
        if wf.id not in ids:
            ids.append(wf.id)
        if len(ids) >= min(limit, MAX_CALLS):
            break
    checks: list[CallCheck] = []
    problems: list[str] = []
    for wid in ids:
        try:
            recorded, steps = await recorded_call(client, wid)
        except CheckError as exc:
            problems.append(str(exc))
            continue
        checks.append(check_call(wid.removeprefix(CALL_WORKFLOW_PREFIX), recorded, new, steps))
    return checks, problems
