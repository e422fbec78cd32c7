"""Starting and talking to calls: what the CLI, the agent and the tests use.

It checks what it can before anything reaches Temporal (variables, sizes), so a bad
request fails here with a clear message instead of as a rejected event. It names the
workflow, its updates and queries by their names and types them with the contract
(``ringflow/contract/``), never by importing ``CallWorkflow``: the agent imports this
module, and the workflow would bring the activities' I/O clients along.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from temporalio.client import Client, WithStartWorkflowOperation, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy

from ringflow.activities.search_attributes import (
    RINGFLOW_CAMPAIGN,
    RINGFLOW_DIRECTION,
    RINGFLOW_FLOW,
    RINGFLOW_JOURNEY,
    RINGFLOW_NODE,
    RINGFLOW_STATUS,
    RINGFLOW_TRANSITIONS,
)
from ringflow.callflow.errors import FlowError, Issue
from ringflow.callflow.inputs import resolve_variables, undeclared_variables
from ringflow.callflow.model import FlowDefinition
from ringflow.callflow.safe_text import find_unsafe
from ringflow.callflow.state import CallState
from ringflow.contract.call import CallInput, CallView, call_input_problems, call_workflow_id
from ringflow.contract.events import (
    CallEvent,
    EventBatch,
    HangupEvent,
    Heartbeat,
    TransitionEvent,
    Turn,
    TurnsEvent,
)
from ringflow.contract.records import CallRecord
from ringflow.contract.room import RoomEvent
from ringflow.contract.supervision import Supervision, SupervisorAnswer, SupervisorRequest
from ringflow.contract.updates import (
    AttachRequest,
    CallFunctionRequest,
    CallFunctionResult,
    Snapshot,
    ValuesAnswer,
    ValuesRequest,
)
from ringflow.contract.wire import MAX_SIGNAL_BYTES, MAX_TEXT_CHARS, encoded_bytes

__all__ = [
    "MAX_SIGNAL_BYTES",
    "CallHandle",
    "checked_call_input",
    "start_call",
    "start_or_attach",
    "workflow_id",
]


CALL_WORKFLOW = "CallWorkflow"  # the name ``workflows/call.py`` registers


def workflow_id(call_id: str) -> str:
    return call_workflow_id(call_id)


def new_call_id() -> str:
    return uuid.uuid4().hex[:16]


def tracing_on() -> bool:
    """A tracer provider is installed (``ringflow.tracing``): spans are recorded."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider)


@contextmanager
def call_root(call_id: str, flow: str) -> Iterator[dict[str, str]]:
    """The root span of one call's trace, current while the call is started, and its W3C
    context (``traceparent``, ``tracestate``) for the call's input (``CallInput.trace``):
    the workflow's spans hang under the start's span (Temporal's interceptor carries it in
    the start's headers), and every agent that attaches, first or after a crash, parents
    its spans on the input's context (``agents/call_trace.py``), so a call is one trace with
    this one root. Always a new trace: a span current where the call is started (an API
    request's, a CLI's) is linked, not its parent, so a call is never a branch of whatever
    started it. With tracing off: no span, and ``{}``."""
    if not tracing_on():
        yield {}
        return
    from opentelemetry.context import Context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    attrs = {"ringflow.call_id": call_id, "ringflow.flow": flow}
    here = trace.get_current_span().get_span_context()
    links = [trace.Link(here)] if here.is_valid else []
    tracer = trace.get_tracer("ringflow")
    with tracer.start_as_current_span(
        "ringflow.call", Context(), kind=trace.SpanKind.PRODUCER, attributes=attrs, links=links
    ):
        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier)
        yield carrier


def checked_call_input(
    definition: FlowDefinition, call_id: str | None, variables: dict[str, Any] | None, fields: dict[str, Any]
) -> tuple[CallInput, TypedSearchAttributes]:
    """A call's checked input and search attributes: every start goes through here (a client's
    ``start_call``, an inbound ``start_or_attach``, a campaign's child call), so they agree.
    Pure (no I/O), hence usable inside a workflow. Raises :class:`FlowError` on bad inputs."""
    _, issues = resolve_variables(definition.flow, variables or {})
    issues += undeclared_variables(definition.flow, variables or {})
    if issues:
        raise FlowError(issues)
    call_id = call_id or new_call_id()
    dial = fields.get("dial")
    if dial is not None:  # a phone call: its own room, named after the call; the number is the callee's
        fields = {
            **fields,
            "room": fields.get("room") or call_id,
            "called_number": dial.to,
            "caller_number": dial.from_number,
        }
    inp = CallInput(call_id=call_id, definition=definition, variables=variables or {}, **fields)
    if problems := call_input_problems(inp):
        raise FlowError([Issue("", p) for p in problems])
    attrs: list[SearchAttributePair[Any]] = [
        SearchAttributePair(RINGFLOW_STATUS, "dialing"),
        SearchAttributePair(RINGFLOW_FLOW, definition.flow.flow),
        SearchAttributePair(RINGFLOW_NODE, (inp.journey and inp.journey.node) or definition.flow.start_node),
        SearchAttributePair(RINGFLOW_DIRECTION, inp.direction),
        SearchAttributePair(RINGFLOW_TRANSITIONS, 0),
    ]
    if inp.campaign_id:
        attrs.append(SearchAttributePair(RINGFLOW_CAMPAIGN, inp.campaign_id))
    if inp.journey is not None:
        attrs.append(SearchAttributePair(RINGFLOW_JOURNEY, inp.journey.context.journey_id))
    return inp, TypedSearchAttributes(attrs)


async def start_call(
    client: Client,
    definition: FlowDefinition,
    *,
    task_queue: str,
    call_id: str | None = None,
    variables: dict[str, Any] | None = None,
    **fields: Any,
) -> CallHandle:
    """Start a CallWorkflow; raises :class:`FlowError` when the inputs are wrong."""
    if bad := find_unsafe(variables or {}):  # the workflow would replace it: the caller can fix it
        raise FlowError([Issue("", f"variable {bad}")])
    inp, attrs = checked_call_input(definition, call_id, variables, fields)
    with call_root(inp.call_id, definition.flow.flow) as carrier:  # the call's trace
        handle = await client.start_workflow(
            CALL_WORKFLOW,
            inp.model_copy(update={"trace": carrier}) if carrier else inp,
            result_type=CallRecord,
            id=workflow_id(inp.call_id),
            task_queue=task_queue,
            search_attributes=attrs,
            static_summary=f"{definition.flow.flow} v{definition.flow.version} call",
        )
    return CallHandle(client, inp.call_id, handle)


async def start_or_attach(
    client: Client,
    definition: FlowDefinition,
    *,
    task_queue: str,
    call_id: str,
    agent_id: str,
    variables: dict[str, Any] | None = None,
    **fields: Any,
) -> tuple[CallHandle, Snapshot]:
    """An inbound call: start its workflow and attach to it in one round trip
    (update-with-start). A second agent for the same room attaches to the running call."""
    inp, attrs = checked_call_input(definition, call_id, variables, fields)
    with call_root(call_id, definition.flow.flow) as carrier:  # the call's trace, if this starts it
        start: WithStartWorkflowOperation[Any, CallRecord] = WithStartWorkflowOperation(
            CALL_WORKFLOW,
            inp.model_copy(update={"trace": carrier}) if carrier else inp,
            result_type=CallRecord,
            id=workflow_id(call_id),
            task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            search_attributes=attrs,
            static_summary=f"{definition.flow.flow} v{definition.flow.version} inbound call",
        )
        snap = await client.execute_update_with_start_workflow(
            "attach", AttachRequest(agent_id=agent_id), start_workflow_operation=start, result_type=Snapshot
        )
    return CallHandle(client, call_id), snap


class CallHandle:
    """A call seen from outside: typed signals, updates and queries."""

    def __init__(self, client: Client, call_id: str, handle: WorkflowHandle[Any, Any] | None = None) -> None:
        self.client = client
        self.call_id = call_id
        self.handle = handle or client.get_workflow_handle(workflow_id(call_id), result_type=CallRecord)

    @staticmethod
    def _check_size(payload: Any) -> None:
        size = encoded_bytes(payload)
        if size > MAX_SIGNAL_BYTES:
            raise ValueError(f"message is {size} bytes; the limit is {MAX_SIGNAL_BYTES}")

    # Signals go by name: the workflow takes them all in one dynamic handler (workflows/intake.py).
    async def transition(self, ev: TransitionEvent) -> None:
        self._check_size(ev)
        await self.handle.signal("transition", ev)

    async def turns(self, ev: TurnsEvent) -> None:
        for i, t in enumerate(ev.items):
            if len(t.text) > MAX_TEXT_CHARS:
                raise ValueError(f"turn {i} has {len(t.text)} characters; the limit is {MAX_TEXT_CHARS}")
        self._check_size(ev)
        await self.handle.signal("turns", ev)

    async def event(self, ev: CallEvent) -> None:
        self._check_size(ev)
        await self.handle.signal("event", ev)

    async def batch(self, batch: EventBatch) -> None:
        self._check_size(batch)
        await self.handle.signal("events", batch)

    async def hangup(self, reason: str = "user_hangup", event_id: str | None = None) -> None:
        await self.handle.signal(
            "hangup", HangupEvent(event_id=event_id or f"hangup-{uuid.uuid4().hex[:8]}", reason=reason)
        )

    async def heartbeat(self, agent_id: str) -> None:
        await self.handle.signal("heartbeat", Heartbeat(agent_id=agent_id))

    async def room_event(self, ev: RoomEvent) -> None:
        """What LiveKit said about the call's room (``agents/webhooks.py``)."""
        await self.handle.signal("room_event", ev)

    async def call_function(self, req: CallFunctionRequest) -> CallFunctionResult:
        return await self.handle.execute_update("call_function", req, result_type=CallFunctionResult)

    async def attach(
        self, agent_id: str, *, after_seq: int = 0, settle: bool = False, epoch: int | None = None
    ) -> Snapshot:
        """Without ``epoch``: a new agent, which the workflow gives the next epoch (in the
        snapshot). With one: the agent of that epoch asks again (refused once replaced)."""
        return await self.handle.execute_update(
            "attach",
            AttachRequest(agent_id=agent_id, after_seq=after_seq, settle=settle, epoch=epoch),
            result_type=Snapshot,
        )

    async def settle(self, agent_id: str, *, after_seq: int, epoch: int | None = None) -> CallState:
        """The call's state once the workflow has applied the agent's events up to
        ``after_seq`` and run what the engine ordered (``CallWorkflow.settle``)."""
        req = AttachRequest(agent_id=agent_id, after_seq=after_seq, settle=True, epoch=epoch)
        try:
            return await self.handle.execute_update("settle", req, result_type=CallState)
        except WorkflowUpdateFailedError as exc:
            if "expected but not found" not in str(getattr(exc.cause, "message", "")):
                raise
        # A worker of the release before ``settle`` (agents may roll out first): attach's
        # whole snapshot, of which the state.
        return (await self.attach(agent_id, after_seq=after_seq, settle=True, epoch=epoch)).state

    async def agent_epoch(self) -> int:
        """The epoch of the call's current agent (0 before any attach)."""
        epoch: int = await self.handle.query("agent_epoch", result_type=int)
        return epoch

    async def supervision(self) -> Supervision:
        """The call's supervisors' actions and takeover (a query: no history)."""
        return await self.handle.query("supervision", result_type=Supervision)

    async def supervise(self, req: SupervisorRequest) -> SupervisorAnswer:
        """A supervisor's whisper, takeover or hand-back; refused (``WorkflowUpdateFailedError``
        or an RPC error naming why) when the call cannot take it now."""
        return await self.handle.execute_update("supervise", req, result_type=SupervisorAnswer)

    async def values(self, extraction_id: str, *, after_seq: int, epoch: int | None = None) -> ValuesAnswer:
        """A running extraction's result once it is known (``CallWorkflow.values``); refused
        with ``AgentSuperseded`` once the agent of ``epoch`` was replaced."""
        req = ValuesRequest(id=extraction_id, after_seq=after_seq, epoch=epoch)
        return await self.handle.execute_update("values", req, result_type=ValuesAnswer)

    async def state(self) -> CallView:
        return await self.handle.query("state", result_type=CallView)

    async def transcript(self, database_url: str | None = None) -> list[Turn]:
        """The call's whole transcript, in order, paged through the ``transcript_window``
        query (no answer nears the payload limit). After continue-as-new the workflow holds
        only the newest turns: with ``database_url`` the earlier ones come from the database
        (without it, only the turns the workflow holds)."""
        got: dict[int, Turn] = {}
        nxt, total = 0, 0
        while True:
            window = await self.handle.query("transcript_window", nxt, result_type=dict)
            total = int(window["total"])
            for i, t in enumerate(window["turns"]):
                got[int(window["start"]) + i] = Turn.model_validate(t)
            nxt = int(window["start"]) + len(window["turns"])
            if nxt >= total or not window["turns"]:
                break
        missing = [i for i in range(total) if i not in got]
        if missing and database_url is not None:
            from ringflow.activities.persistence import load_transcript

            for row in load_transcript(self.call_id, database_url=database_url):
                if row.idx not in got and row.idx < total:
                    got[row.idx] = Turn(
                        role=row.role,
                        text=row.text,
                        node=row.node,
                        started_at=row.at.timestamp() if row.at else None,
                        ended_at=row.data.get("ended_at"),
                        interrupted=bool(row.data.get("interrupted")),
                    )
        return [got[i] for i in sorted(got)]
