"""What can happen to a call: the engine's inputs.

Times are given by the caller (``at``, seconds since the epoch): the engine reads no
clock, so the workflow (``workflow.now()``) and the agent feed it the same instants.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from ringflow.callflow.end_reasons import EndReason
from ringflow.callflow.journey import JourneyStart


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    # finite only: the time lands in the state, which must survive a JSON round trip
    at: float | None = Field(None, allow_inf_nan=False)


class CallStarted(_Event):
    type: Literal["call_started"] = "call_started"
    call_id: str = ""
    variables: dict[str, Any] = {}
    caller_number: str | None = None
    called_number: str | None = None
    journey: JourneyStart | None = None  # a journey's call: its node, state and context


class FunctionCalled(_Event):
    """The LLM called a tool (a transition or a node function)."""

    type: Literal["function_called"] = "function_called"
    name: str
    args: dict[str, Any] = {}
    node: str | None = None  # the node the caller believes it is on (checked when given)


class FunctionResult(_Event):
    """A handler or HTTP run ordered by a RunFunction effect has finished."""

    type: Literal["function_result"] = "function_result"
    run_id: int
    result: Any = None
    response: str = "transition_in_yaml"  # or "no_response"; anything else is an error
    error: str | None = None
    state: dict[str, Any] | None = None  # flow_manager.state after the handler ran


class ExtractionResult(_Event):
    """A node's extracted values (or why there are none: ``error``, the fallback). With
    ``id`` it ends that running extraction (``CallState.extracting``) and resumes an entry
    that waited for it; without, the first one running for ``node``."""

    type: Literal["extraction_result"] = "extraction_result"
    node: str
    values: dict[str, Any] = {}
    error: str | None = None
    id: str | None = None


class UserSpoke(_Event):
    """A final user utterance: resets the idle escalation."""

    type: Literal["user_spoke"] = "user_spoke"


IdleKind = Literal["silence", "empty_transcript", "empty_turn"]


class UserIdle(_Event):
    """An empty input: nothing said for ``idle.timeout_s`` (silence), speech heard that
    transcribed to no words (empty_transcript), or a push-to-talk turn the caller ended
    without saying anything (empty_turn). Each counts toward the idle rule."""

    type: Literal["user_idle"] = "user_idle"
    kind: IdleKind = "silence"


class HangUp(_Event):
    """The call is over from outside: the caller hung up, the agent was lost, ..."""

    type: Literal["hangup"] = "hangup"
    reason: EndReason = "user_hangup"


class DtmfEntered(_Event):
    """The caller's key presses, collected on ``node`` as its ``dtmf`` spec says."""

    type: Literal["dtmf_entered"] = "dtmf_entered"
    digits: str = Field(max_length=64, pattern=r"^[0-9*#A-Da-d]*$")
    node: str | None = None


class MachineAnswered(_Event):
    """An answering machine picked up (the agent's detection, or the simulated dial)."""

    type: Literal["machine_answered"] = "machine_answered"
    category: str = Field("machine-vm", max_length=40)


class JobsFinished(_Event):
    """A background job group is done (callflow/jobs.py): its result goes into the state
    under the entry's name, and ``transition_to`` routes on its ``outcome`` if the call is
    still on the node that started it."""

    type: Literal["jobs_finished"] = "jobs_finished"
    group_id: str = Field(max_length=200)
    node: str
    name: str
    result: dict[str, Any] = {}


class MaxDuration(_Event):
    type: Literal["max_duration"] = "max_duration"


class SupervisorAction(_Event):
    """A supervisor's action on the live call (``ringflow call whisper|takeover|handback``),
    as the workflow numbered it (``id``: 1, 2, ...) when it took it. The agent applies it
    at a point of its own events and reports it there, so both engines apply it at the same
    step; an id at or below ``CallState.supervisor_seen`` was applied already and changes
    nothing (a successor agent that sees it again).

    ``whisper``: a hint for the bot's next turn (the agent puts it in its LLM context; the
    caller never hears it). ``takeover``: a person has the call, the bot neither speaks nor
    listens and the flow's idle rule and tools pause. ``handback``: the bot has the call
    again, at ``node`` (or where it was), with the person's part of the conversation in its
    context."""

    type: Literal["supervisor"] = "supervisor"
    id: int = Field(ge=1)
    action: Literal["whisper", "takeover", "handback"]
    node: str | None = Field(None, max_length=200)


Event = Annotated[
    CallStarted
    | FunctionCalled
    | FunctionResult
    | ExtractionResult
    | UserSpoke
    | UserIdle
    | HangUp
    | MaxDuration
    | DtmfEntered
    | MachineAnswered
    | JobsFinished
    | SupervisorAction,
    Field(discriminator="type"),
]
EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)
