"""A call as the workflow holds it: its input, its id, the ``state`` query's view of it,
and what one run hands the next at continue-as-new."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ringflow.callflow.end_reasons import EndReason
from ringflow.callflow.events import ExtractionResult
from ringflow.callflow.journey import JourneyStart
from ringflow.callflow.model import FlowDefinition
from ringflow.callflow.state import CallState
from ringflow.contract.dial import Dial
from ringflow.contract.events import InboxEvent, RejectedEvent, Turn
from ringflow.contract.flow_ref import CanaryPin, FlowRef
from ringflow.contract.ids import CALL_WORKFLOW_PREFIX as CALL_WORKFLOW_PREFIX  # re-exported
from ringflow.contract.ids import call_workflow_id as call_workflow_id
from ringflow.contract.recording import RecordingInfo
from ringflow.contract.records import AmdVerdict, SipOutcome
from ringflow.contract.supervision import Supervision
from ringflow.contract.updates import CallFunctionResult
from ringflow.contract.wire import MAX_ROUTE_CHARS, MAX_TEXT_CHARS, Answer, Message


def call_id_of(workflow_id: str) -> str | None:
    """The call id of a call's workflow id; None for any other workflow (a campaign's)."""
    return (
        workflow_id.removeprefix(CALL_WORKFLOW_PREFIX)
        if workflow_id.startswith(CALL_WORKFLOW_PREFIX)
        else None
    )


def call_input_problems(inp: CallInput) -> list[str]:
    """The call input's free-text fields over their limits, named with their length only.

    Checked by the client and again by the workflow (a plain ``Field`` limit would make the
    workflow's own input undecodable, which fails its task instead of the call)."""
    limits = {
        "room": MAX_ROUTE_CHARS,
        "campaign_id": MAX_ROUTE_CHARS,
        "caller_number": MAX_ROUTE_CHARS,
        "called_number": MAX_ROUTE_CHARS,
    }
    problems = [
        f"{name} has {len(value)} characters; the limit is {limit}"
        for name, limit in limits.items()
        if isinstance(value := getattr(inp, name), str) and len(value) > limit
    ]
    problems += [
        f"variable '{k[:64]}' has {len(v)} characters; the limit is {MAX_TEXT_CHARS}"
        for k, v in inp.variables.items()
        if isinstance(v, str) and len(v) > MAX_TEXT_CHARS
    ]
    return problems


class CallInput(Message):
    call_id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$")
    definition: FlowDefinition
    direction: Literal["outbound", "inbound"] = "outbound"
    variables: dict[str, Any] = {}
    room: str | None = None
    campaign_id: str | None = None
    caller_number: str | None = None
    called_number: str | None = None
    agent_timeout_s: float = Field(15.0, gt=0, le=3600, allow_inf_nan=False)
    max_dispatch_attempts: int = Field(3, ge=1, le=100)
    max_history_events: int = Field(2000, ge=50, le=50_000)  # continue-as-new past this many events
    # an end node's last turn: wait this long for the agent's hangup
    final_turn_grace_s: float = Field(30.0, ge=0, le=3600, allow_inf_nan=False)
    # a gap in the agent's seq numbers is skipped (and recorded) once events wait this long
    gap_wait_s: float = Field(30.0, gt=0, le=3600, allow_inf_nan=False)
    # the node and transition count in search attributes trail the call by at most this
    # (each upsert is a history event and a visibility write: workflows/visibility.py)
    visibility_refresh_s: float = Field(60.0, ge=0, le=3600, allow_inf_nan=False)
    # set only by continue-as-new: the previous run's state (the field's name is the wire's)
    carry: Continuation | None = None
    dial: Dial | None = None  # an outbound phone call to place (workflows/dialing.py)
    # a journey's call (workflows/journey.py): its start node, the journey's state, context
    journey: JourneyStart | None = None
    # the published version ``definition`` is: on the wire the definition is then left out
    # (ringflow/flow_codec.py), and the worker checks its handler code against it at the start
    flow_ref: FlowRef | None = None
    # the call's trace: the W3C context (traceparent, tracestate) of its root span, which
    # every agent attaching to the call parents its spans on (ringflow/tracing.py: call_root)
    trace: dict[str, str] = Field(default_factory=dict, max_length=4)
    # a call a campaign sent to one side of a canary (``callflow/canary.py``): the call's
    # record names it, so the canary counts the call with that side
    canary: CanaryPin | None = None


class CallView(Answer):
    """The answer to the ``state`` query: the call as an operator (``call show``), the
    simulator and the tests see it while it runs."""

    call_id: str
    flow: str
    flow_version: int
    status: str
    node: str | None
    path: list[str]
    variables: dict[str, Any]
    extracted: dict[str, Any]
    state: dict[str, Any]  # what the flow's handlers keep (``flow_manager.state``)
    transitions: int
    disposition: str | None  # set once the call has ended
    end_reason: EndReason | None
    started_at: float
    updated_at: float | None
    agent_id: str | None
    next_seq: int
    waiting_for_seq: int | None  # the seq the inbox holds later events for
    duplicates: int
    rejected: list[RejectedEvent]  # the newest 20
    extraction_errors: dict[str, str]
    pending_functions: int
    runs: int  # runs of the workflow so far (continue-as-new starts a new one)
    turns: int  # transcript turns, all runs together
    room: str | None  # the LiveKit room, as the call was given it
    sip: SipOutcome | None  # a dialed call: the SIP status of the dial
    amd: AmdVerdict | None  # the answering-machine verdict
    epoch: int = 0  # the current agent's attach number (0: no agent has attached)
    recording: RecordingInfo | None = None  # the call's recording (workflows/recording.py)
    supervision: Supervision | None = None  # supervisors' actions, a takeover (contract/supervision.py)
    refused: int = 0  # the LLM's function calls the flow refused (``CallState.refused``)


class Continuation(Message):
    """What one run hands the next at continue-as-new (``CallInput.carry``): compact, the
    transcript's tail only."""

    state: CallState
    status: str
    next_seq: int
    held: list[InboxEvent] = []  # sent as plain dicts by an earlier release; the same JSON
    seen_ids: list[str] = []
    transcript_tail: list[Turn] = []
    transcript_count: int = 0
    rejected: list[RejectedEvent] = []
    agent_id: str | None = None
    dispatch_failures: int = 0
    extraction_errors: dict[str, str] = {}
    pending_extractions: list[str] = []  # ids (``<node>#<visit>``) of extractions to run again
    values_ready: list[ExtractionResult] = []  # results the agent has not applied yet
    events_applied: int = 0
    started_at: float | None = None
    runs: int = 1
    hangup_seen: bool = False
    # function calls already answered: a repeated event id is answered, never run again
    fn_results: dict[str, CallFunctionResult] = {}
    fn_done: list[str] = []  # answered earlier, result no longer kept
    held_since: float | None = None
    sip: SipOutcome | None = None
    amd: AmdVerdict | None = None
    epoch: int = 0  # the current agent's attach number: the next attach gets one more
    recording: RecordingInfo | None = None  # the call's recording, once it was asked for
    supervision: Supervision | None = None  # supervisors' actions and a takeover under way


CallInput.model_rebuild()
