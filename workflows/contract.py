"""The contract between the agent, the workflow and its activities: every type that crosses
a process boundary (the call's input, the agent's events, signals, updates and query
answers, and the records the workflow hands its activities).

No I/O here and nothing that does any: the agent imports this module (and
``workflows.client``) without pulling in the workflow, the activities' HTTP or database
clients. ``CallRecord``, ``WebhookDelivery`` and ``DispatchRequest`` are defined one layer
down, in ``activities/records.py`` (the activities take them and may not import
upward), and re-exported here.

Everything the agent sends carries an ``event_id`` (applied once, even across
continue-as-new); events that change the conversation also carry a ``seq`` so the
workflow applies them in the order the agent produced them, whatever order they
arrive in.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ringflow.activities.records import (
    AmdVerdict,
    CallRecord,
    DispatchRequest,
    DispatchResult,
    SipOutcome,
    TranscriptAppend,
    TranscriptItem,
    WebhookDelivery,
)
from ringflow.activities.records import (
    encoded_bytes as encoded_bytes,
)
from ringflow.activities.telephony import Dial
from ringflow.callflow.effects import Effect
from ringflow.callflow.end_reasons import EndReason
from ringflow.callflow.events import ExtractionResult
from ringflow.callflow.model import FlowDefinition
from ringflow.callflow.state import CallState

__all__ = [  # the records defined in activities/records.py are re-exported: one import for the contract
    "EXTRACTION_TIMEOUT_S",
    "MAX_ARGS_BYTES",
    "MAX_BATCH",
    "MAX_EPOCH_S",
    "MAX_ID_CHARS",
    "MAX_NAME_CHARS",
    "MAX_ROUTE_CHARS",
    "MAX_SEQ",
    "MAX_SIGNAL_BYTES",
    "MAX_TEXT_CHARS",
    "AgentEvent",
    "AmdVerdict",
    "AttachRequest",
    "CallEvent",
    "CallFunctionRequest",
    "CallFunctionResult",
    "CallInput",
    "CallRecord",
    "CallView",
    "Carry",
    "Dial",
    "DispatchRequest",
    "DispatchResult",
    "Epoch",
    "EventBatch",
    "EventId",
    "HangupEvent",
    "Heartbeat",
    "InboxEvent",
    "RejectedEvent",
    "Seq",
    "SipOutcome",
    "Snapshot",
    "Tombstone",
    "TranscriptAppend",
    "TranscriptItem",
    "TransitionEvent",
    "Turn",
    "TurnsEvent",
    "ValuesAnswer",
    "ValuesRequest",
    "WebhookDelivery",
    "call_input_problems",
    "encoded_bytes",
    "oversized_args",
]

MAX_TEXT_CHARS = 16_000  # one turn's text; a longer one is refused, not truncated silently
MAX_ARGS_BYTES = 32_000
MAX_BATCH = 200
# Free text that is not conversation: ids, node and function names, rooms and numbers. Each
# is copied into state, logs or search attributes, so none may be arbitrarily long.
MAX_ID_CHARS = 128
MAX_NAME_CHARS = 128  # node ids and function names are at most 64 in a valid flow
MAX_ROUTE_CHARS = 256  # rooms, campaign ids, phone numbers and SIP URIs
MAX_SIGNAL_BYTES = 256 * 1024  # one signal's encoded payload (the client refuses a larger one)
# Times are seconds since the epoch. Bounded and finite so that a hostile ``1e20`` or ``NaN``
# is refused when the message arrives, not when workflow code turns it into a datetime.
MAX_EPOCH_S = 1e10  # the year 2286
MAX_SEQ = 2**53  # exact in a JSON number everywhere
# An extraction (its LLM call and retries) ends within this; past it, both sides take the
# fallback (no values: templates' defaults, gates' default branches).
EXTRACTION_TIMEOUT_S = 20.0

Epoch = Annotated[float, Field(ge=0, le=MAX_EPOCH_S, allow_inf_nan=False)]
Seq = Annotated[int, Field(ge=1, le=MAX_SEQ)]
EventId = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS)]


def oversized_args(name: str, args: dict[str, Any]) -> str | None:
    """Why a function call's arguments are too large to carry, or None. One rule for the
    workflow (``call_function``'s validator) and the agent (a transition's signal), so the
    LLM hears the same refusal whichever side would have to carry them."""
    if args and (size := encoded_bytes(args)) > MAX_ARGS_BYTES:
        return (
            f"the arguments of '{name}' are larger than {MAX_ARGS_BYTES} bytes ({size} bytes "
            "encoded); call it again with shorter values"
        )
    return None


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


class _Msg(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Answer(BaseModel):
    """What the workflow answers (update results, query answers). Read tolerantly, unknown
    fields ignored: agents and workers roll out separately, and an agent must read the
    answers of a worker one release older or newer than itself."""

    model_config = ConfigDict(extra="ignore")


class CallInput(_Msg):
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
    carry: Carry | None = None  # set only by continue-as-new
    dial: Dial | None = None  # an outbound phone call to place (workflows/dialing.py)


class Turn(_Msg):
    role: Literal["user", "assistant", "system", "tool"]
    text: str = ""
    started_at: Epoch | None = None
    ended_at: Epoch | None = None
    interrupted: bool = False
    node: str | None = Field(None, max_length=MAX_NAME_CHARS)


class TransitionEvent(_Msg):
    type: Literal["transition"] = "transition"
    event_id: EventId
    seq: Seq
    from_node: str = Field(max_length=MAX_NAME_CHARS)
    name: str = Field(max_length=MAX_NAME_CHARS)
    args: dict[str, Any] = {}
    at: Epoch | None = None


class TurnsEvent(_Msg):
    type: Literal["turns"] = "turns"
    event_id: EventId
    seq: Seq
    items: list[Turn]
    at: Epoch | None = None


class CallEvent(_Msg):
    """Something that happened on the line: idle, interruption, DTMF, agent attached..."""

    type: Literal["event"] = "event"
    event_id: EventId
    seq: Seq | None = None
    kind: Literal[
        "user_idle",
        "user_spoke",
        "interruption",
        "dtmf",
        "agent_attached",
        "agent_detached",
        "note",
        "answering_machine",
        "amd",  # the answering-machine detection's verdict, any verdict: recorded with the call
        "extracted",  # the agent applied an extraction's result here: {id, node, values, error}
    ]
    data: dict[str, Any] = {}
    at: Epoch | None = None


class HangupEvent(_Msg):
    type: Literal["hangup"] = "hangup"
    event_id: EventId
    reason: EndReason = "user_hangup"
    at: Epoch | None = None


class Heartbeat(_Msg):
    type: Literal["heartbeat"] = "heartbeat"
    agent_id: str = Field(min_length=1, max_length=MAX_ID_CHARS)
    at: Epoch | None = None


AgentEvent = Annotated[
    TransitionEvent | TurnsEvent | CallEvent | HangupEvent | Heartbeat, Field(discriminator="type")
]


class Tombstone(_Msg):
    """A refused event that said its ``seq``: the inbox orders it like any event with that
    seq and applies it as a recorded refusal, so the events behind it go on (see
    ``workflows/intake.py``). Also what stands in for an event too large to hold."""

    type: Literal["refused"] = "refused"
    event_id: str | None = None
    seq: int
    reason: str


# What the inbox holds and hands on in order (a heartbeat is never ordered or held).
InboxEvent = Annotated[
    TransitionEvent | TurnsEvent | CallEvent | HangupEvent | Heartbeat | Tombstone,
    Field(discriminator="type"),
]


class EventBatch(_Msg):
    events: list[AgentEvent] = Field(max_length=MAX_BATCH)


class CallFunctionRequest(_Msg):
    event_id: EventId
    node: str = Field(max_length=MAX_NAME_CHARS)
    name: str = Field(max_length=MAX_NAME_CHARS)
    args: dict[str, Any] = {}
    at: Epoch | None = None
    # The agent's last sequenced event before this call: the workflow applies it first, so
    # a function called right after a transition runs on the node the agent is on.
    after_seq: int = Field(0, ge=0, le=MAX_SEQ)


class CallFunctionResult(_Answer):
    """What the agent gives the LLM, and where the call is now."""

    result: Any = None
    error: bool = False
    run_llm: bool = True
    decision: Literal["stay", "transition", "end"] = "stay"
    node: str | None = None
    effects: list[Effect] = []  # the engine's effects, for the agent to apply
    state: CallState | None = None


class AttachRequest(_Msg):
    agent_id: str = Field(min_length=1, max_length=MAX_ID_CHARS)
    at: Epoch | None = None
    # With ``settle``: answer once events up to ``after_seq`` are applied and no function the
    # engine ordered (an action node) is still running, so the agent resumes on a settled node.
    after_seq: int = Field(0, ge=0, le=MAX_SEQ)
    settle: bool = False


class Snapshot(_Answer):
    """All an agent needs to carry on a call where it is (first attach or after a crash).
    No prompt or tools: the agent's engine derives them from ``definition`` and ``state``."""

    call_id: str
    node: str | None
    state: CallState
    transcript_tail: list[Turn]
    ended: bool
    next_seq: int
    definition: FlowDefinition


class ValuesRequest(_Msg):
    """The agent asks for a running extraction's result (``values``): answered once it is
    known, or with an error once ``EXTRACTION_TIMEOUT_S`` has passed."""

    id: str = Field(min_length=1, max_length=MAX_NAME_CHARS + 12)
    after_seq: int = Field(0, ge=0, le=MAX_SEQ)  # the event that started it is applied first


class ValuesAnswer(_Answer):
    """An extraction's result for the agent to apply (and report with an ``extracted``
    event); ``gone``: the call no longer waits for it (applied already, or the call ended)."""

    id: str
    node: str
    values: dict[str, Any] = {}
    error: str | None = None
    gone: bool = False


class RejectedEvent(_Msg):
    event_id: str | None
    reason: str
    at: Epoch | None = None


class RouteRequest(_Msg):
    """The agent routes a finished job group (``route_jobs``), after its events up to
    ``after_seq``, as a node function's result is applied (``workflows/jobs.py``)."""

    group_id: str = Field(min_length=1, max_length=200)
    after_seq: int = Field(0, ge=0, le=MAX_SEQ)


class CancelRequest(_Msg):
    """Cancel running job groups (``cancel_jobs``): the LLM's built-in, or the caller
    barging in on a group marked ``cancel_on_interruption``; none named: every such group."""

    group_ids: list[str] = Field([], max_length=50)
    reason: Literal["llm", "interruption"] = "llm"


class DeviceToolRecord(_Msg):
    """A call of a tool the caller's device offers, made by the agent over LiveKit RPC (the
    workflow cannot reach the device), recorded once by its event id like a function's."""

    event_id: EventId
    node: str = Field(max_length=MAX_NAME_CHARS)
    name: str = Field(max_length=MAX_NAME_CHARS)
    args: dict[str, Any] = {}
    result: Any = None
    error: bool = False
    at: Epoch | None = None
    after_seq: int = Field(0, ge=0, le=MAX_SEQ)  # the agent's events before it are applied first


class CallView(_Answer):
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


class Carry(_Msg):
    """What one run hands the next at continue-as-new: compact, transcript tail only."""

    state: CallState
    status: str
    next_seq: int
    held: list[InboxEvent] = []  # carried as dicts before; the same JSON
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


CallInput.model_rebuild()
