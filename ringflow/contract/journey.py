"""A journey on the wire: its input, what one run hands the next, each call's summary, the
callback's join, the end and the ``state`` query's view (``workflows/journey.py``).

A journey's phone number is in its input (the journey dials it) and nowhere else: its
workflow id and search attribute carry the person's hash (``contract/ids.py``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ringflow.callflow.model import FlowDefinition
from ringflow.contract.flow_ref import CanaryPin, FlowRef
from ringflow.contract.ids import JOURNEY_WORKFLOW_PREFIX as JOURNEY_WORKFLOW_PREFIX  # re-exported
from ringflow.contract.ids import journey_workflow_id as journey_workflow_id
from ringflow.contract.wire import MAX_ROUTE_CHARS, Answer, Message

JOURNEY_WORKFLOW = "JourneyWorkflow"  # the name ``workflows/journey.py`` registers
SUMMARIES_KEPT = 10  # the newest call summaries a journey carries (its context and ``show``)
JourneyStatus = Literal["calling", "scheduled", "open", "ended"]
JourneyEnd = Literal["completed", "cancelled", "dnc", "max_calls", "no_window"]


class JourneyRetry(Message):
    """A call of the journey that did not reach the person (``no_answer``, ``busy``,
    ``voicemail``, ``dial_failed``, ``agent_lost``) is placed again ``delay_s`` later, up to
    ``count`` times in a row, as ``campaign start --retry`` does."""

    count: int = Field(ge=0, le=100)
    delay_s: float = Field(ge=0, le=30 * 86400, allow_inf_nan=False)


class CallSummary(Answer):
    """One call of the journey, as the next call's context and ``journey show`` give it."""

    n: int  # its number in the journey, from 1
    call_id: str
    direction: str = "outbound"
    started_at: float
    ended_at: float | None = None
    end_reason: str | None = None
    disposition: str | None = None
    node: str | None = None  # where it ended
    summary: str = ""  # one line: how it ended and what it learnt


class FollowUpDue(Answer):
    """A follow-up scheduled: the next call's instant (epoch seconds, the journey's clock),
    node and first words, and which call asked for it."""

    due_at: float
    node: str | None = None
    say: str | None = None
    asked_by: str  # the call id
    why: str = ""  # e.g. "end node goodbye", "state.follow_up"


class JourneyCarry(Message):
    """What one run hands the next at continue-as-new (between calls, never during one)."""

    calls_total: int = 0
    summaries: list[CallSummary] = []
    state: dict[str, Any] = {}
    extracted: dict[str, Any] = {}
    follow_up: FollowUpDue | None = None
    open_until: float | None = None
    runs: int = 1
    notes: list[str] = []  # the newest problems met (a bad follow-up, a refused call)
    skew_s: float = 0.0  # the journey's clock minus Temporal's (a simulation's, see time_scale)
    retries: dict[str, int] = {}  # retries in a row so far, by outcome (reset once reached)
    held: bool = False  # its campaign is paused: no further call until it resumes


class JourneyInput(Message):
    """A journey's start. ``phone`` is E.164; ``timezone`` the person's (IANA), used for a
    follow-up's ``at`` and the calling window; ``windows`` as ``campaign start --window``.
    ``first_call``: place a call at once (else the journey waits for a callback or a
    follow-up). ``time_scale``/``clock_origin``: simulations only (the journey's clock
    runs ``time_scale`` times as fast from ``clock_origin``)."""

    flow: FlowDefinition
    phone: str = Field(min_length=3, max_length=64, pattern=r"^\+[0-9]{6,20}$")
    timezone: str = Field("UTC", max_length=64)
    windows: list[str] = ["always"]
    variables: dict[str, Any] = {}
    from_number: str | None = Field(None, max_length=MAX_ROUTE_CHARS)
    trunk_id: str | None = Field(None, max_length=MAX_ROUTE_CHARS)
    ringing_timeout_s: float | None = Field(None, gt=0, le=300)
    agent_timeout_s: float = Field(15.0, gt=0, le=3600, allow_inf_nan=False)
    first_call: bool = True
    retry: dict[str, JourneyRetry] = {}  # by outcome: see JourneyRetry
    first_node: str | None = Field(None, max_length=64)
    first_say: str | None = Field(None, max_length=500)
    campaign_id: str | None = Field(None, max_length=MAX_ROUTE_CHARS)
    # A campaign's journey: the campaign's calling windows (its ``Windows``, as JSON; over
    # ``windows``), the pace its calls take on the trunk's limiter, and its first call's
    # slot (the campaign's attempt: the dial waits for it).
    campaign_windows: dict[str, Any] | None = None
    pace_cps: float | None = Field(None, gt=0, le=1000, allow_inf_nan=False)
    first_not_before: float | None = Field(None, ge=0, allow_inf_nan=False)
    max_calls: int = Field(100, ge=1, le=10_000)
    # with no follow-up due, the journey stays open for a callback this long after a call
    open_for_s: float = Field(7 * 86400, ge=0, le=365 * 86400, allow_inf_nan=False)
    calls_per_run: int = Field(20, ge=1, le=1000)  # continue-as-new after this many calls
    time_scale: float = Field(1.0, ge=1.0, le=1e7, allow_inf_nan=False)
    clock_origin: float | None = Field(None, ge=0, le=1e10, allow_inf_nan=False)
    carry: JourneyCarry | None = None
    # the published version ``flow`` is: every call of the journey names it (its input leaves
    # the definition out, as the journey's own input does: ``ringflow/flow_codec.py``)
    flow_ref: FlowRef | None = None
    canary: CanaryPin | None = None  # a campaign's journey on a canary's side: its calls are on it


class JoinRequest(Message):
    """An inbound call from the journey's person: the journey starts it as its own call, at
    the flow's callback node, and the agent then attaches to it."""

    call_id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$")
    room: str | None = Field(None, max_length=MAX_ROUTE_CHARS)
    caller_number: str | None = Field(None, max_length=MAX_ROUTE_CHARS)
    called_number: str | None = Field(None, max_length=MAX_ROUTE_CHARS)
    agent_timeout_s: float = Field(15.0, gt=0, le=3600, allow_inf_nan=False)


class JoinAnswer(Answer):
    joined: bool
    call_id: str
    node: str | None = None
    reason: str = ""  # why not, when not joined
    cancelled_follow_up: bool = False


class HoldRequest(Message):
    """A campaign's journey: its campaign was paused (``held``) or resumed. A held journey
    places no call (a follow-up, a retry) until it is resumed; a live call goes on."""

    held: bool = True


class EndRequest(Message):
    reason: Literal["cancelled", "dnc"] = "cancelled"


class JourneyView(Answer):
    """The ``state`` query's answer: what ``ringflow journey show`` prints."""

    journey_id: str
    flow: str
    status: JourneyStatus
    end: JourneyEnd | None = None
    calls_total: int
    calls: list[CallSummary]  # the newest ``SUMMARIES_KEPT``
    active_call: str | None = None
    follow_up: FollowUpDue | None = None
    open_until: float | None = None
    state: dict[str, Any] = {}
    extracted: dict[str, Any] = {}
    runs: int = 1
    notes: list[str] = []
    now: float  # the journey's clock (scaled in a simulation)
    held: bool = False  # its campaign is paused: its next call waits for the resume
