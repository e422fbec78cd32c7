"""What the agent asks the workflow (updates) and what it answers: a node function's call,
attach and settle, routing and cancelling job groups, a device tool's record."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ringflow.callflow.effects import Effect
from ringflow.callflow.events import FunctionResult
from ringflow.callflow.model import FlowDefinition
from ringflow.callflow.state import CallState
from ringflow.contract.events import Turn
from ringflow.contract.flow_ref import FlowRef
from ringflow.contract.wire import (
    MAX_ID_CHARS,
    MAX_NAME_CHARS,
    MAX_SEQ,
    AgentEpoch,
    Answer,
    Epoch,
    EventId,
    Message,
)


class CallFunctionRequest(Message):
    event_id: EventId
    node: str = Field(max_length=MAX_NAME_CHARS)
    name: str = Field(max_length=MAX_NAME_CHARS)
    args: dict[str, Any] = {}
    at: Epoch | None = None
    # The agent's last sequenced event before this call: the workflow applies it first, so
    # a function called right after a transition runs on the node the agent is on.
    after_seq: int = Field(0, ge=0, le=MAX_SEQ)
    epoch: AgentEpoch | None = None
    # The agent's state as it calls (``callflow.function_step.state_digest``), sent to a
    # worker whose snapshot said ``derives``: where the workflow's state is the same, the
    # answer is the run's outcome alone and the agent takes the step itself.
    state_digest: str | None = Field(None, max_length=64)


class CallFunctionResult(Answer):
    """What the agent gives the LLM, and where the call is now: with ``effects`` and
    ``state``, or (asked with the state's digest, and the agent's step the workflow's) with
    ``outcome`` and the new state's ``digest`` instead, for the agent to take the step
    itself (``callflow/function_step.py``)."""

    result: Any = None
    error: bool = False
    run_llm: bool = True
    decision: Literal["stay", "transition", "end"] = "stay"
    node: str | None = None
    effects: list[Effect] = []  # the engine's effects, for the agent to apply
    state: CallState | None = None
    outcome: FunctionResult | None = None  # the run's result, as the engine took it
    digest: str | None = None  # the state after the step (with ``outcome``)
    # the agent's last event (seq) the answer's state holds: the agent's own later events,
    # taken while it waited, go on top of it, as the workflow will apply them
    applied_seq: int | None = None
    # the digest of the state the step starts from: the workflow keeps it with the whole
    # answer, to send ``outcome`` alone to an agent that asks from there (never sent)
    derives_from: str | None = None


class AttachRequest(Message):
    agent_id: str = Field(min_length=1, max_length=MAX_ID_CHARS)
    at: Epoch | None = None
    # With ``settle``: answer once events up to ``after_seq`` are applied and no function the
    # engine ordered (an action node) is still running, so the agent resumes on a settled node.
    after_seq: int = Field(0, ge=0, le=MAX_SEQ)
    settle: bool = False
    # None: a new attach, which the workflow gives the next epoch. An epoch: the agent of that
    # attach asks again (``settle``, or attach with ``settle``), refused once it was replaced.
    epoch: AgentEpoch | None = None


class Snapshot(Answer):
    """All an agent needs to take up a call where it is (first attach or after a crash).
    No prompt or tools: the agent's engine derives them from ``definition`` and ``state``."""

    call_id: str
    node: str | None
    state: CallState
    transcript_tail: list[Turn]
    ended: bool
    next_seq: int
    definition: FlowDefinition
    flow_ref: FlowRef | None = (
        None  # the call's published version: the definition's bytes stay out of history
    )
    # this attach's number: everything the agent sends carries it (0: a worker without epochs)
    epoch: int = 0
    # the worker takes ``CallFunctionRequest.state_digest`` (an older one refuses a field it
    # does not know): the agent sends it only then
    derives: bool = False


class RouteRequest(Message):
    """The agent routes a finished job group (``route_jobs``), after its events up to
    ``after_seq``, as a node function's result is applied (``workflows/jobs.py``)."""

    group_id: str = Field(min_length=1, max_length=200)
    after_seq: int = Field(0, ge=0, le=MAX_SEQ)
    epoch: AgentEpoch | None = None


class CancelRequest(Message):
    """Cancel running job groups (``cancel_jobs``): the LLM's built-in, or the caller
    barging in on a group marked ``cancel_on_interruption``; none named: every such group."""

    group_ids: list[str] = Field([], max_length=50)
    reason: Literal["llm", "interruption"] = "llm"
    epoch: AgentEpoch | None = None


class DeviceToolRecord(Message):
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
    epoch: AgentEpoch | None = None


# An extraction (its LLM call and retries) ends within this; past it, both sides take the
# fallback (no values: templates' defaults, gates' default branches).
EXTRACTION_TIMEOUT_S = 20.0


class ValuesRequest(Message):
    """The agent asks for a running extraction's result (``values``): answered once it is
    known, or with an error once ``EXTRACTION_TIMEOUT_S`` has passed; refused once the
    agent of ``epoch`` was replaced (``workflows/epochs.py``)."""

    id: str = Field(min_length=1, max_length=MAX_NAME_CHARS + 12)
    after_seq: int = Field(0, ge=0, le=MAX_SEQ)  # the event that started it is applied first
    epoch: AgentEpoch | None = None


class ValuesAnswer(Answer):
    """An extraction's result for the agent to apply (and report with an ``extracted``
    event); ``gone``: the call no longer waits for it (applied already, or the call ended)."""

    id: str
    node: str
    values: dict[str, Any] = {}
    error: str | None = None
    gone: bool = False
