"""What the agent tells the workflow as signals: turns, transitions, line events, hang-up.

Everything the agent sends bears an ``event_id`` (applied once, even across
continue-as-new); events that change the conversation also bear a ``seq`` so the workflow
applies them in the order the agent produced them, whatever order they arrive in.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from ringflow.callflow.end_reasons import EndReason
from ringflow.contract.wire import (
    MAX_BATCH,
    MAX_ID_CHARS,
    MAX_NAME_CHARS,
    AgentEpoch,
    Epoch,
    EventId,
    Message,
    Seq,
)


class Turn(Message):
    # ``supervisor``: a person who took the call over spoke (``ringflow call takeover``)
    role: Literal["user", "assistant", "system", "tool", "supervisor"]
    text: str = ""
    started_at: Epoch | None = None
    ended_at: Epoch | None = None
    interrupted: bool = False
    node: str | None = Field(None, max_length=MAX_NAME_CHARS)


class TransitionEvent(Message):
    type: Literal["transition"] = "transition"
    event_id: EventId
    seq: Seq
    from_node: str = Field(max_length=MAX_NAME_CHARS)
    name: str = Field(max_length=MAX_NAME_CHARS)
    args: dict[str, Any] = {}
    at: Epoch | None = None
    epoch: AgentEpoch | None = None


class TurnsEvent(Message):
    type: Literal["turns"] = "turns"
    event_id: EventId
    seq: Seq
    items: list[Turn]
    at: Epoch | None = None
    epoch: AgentEpoch | None = None


class CallEvent(Message):
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
        "supervisor",  # the agent applied a supervisor's action here: {id, action, node}
    ]
    data: dict[str, Any] = {}
    at: Epoch | None = None
    epoch: AgentEpoch | None = None


class HangupEvent(Message):
    type: Literal["hangup"] = "hangup"
    event_id: EventId
    reason: EndReason = "user_hangup"
    at: Epoch | None = None
    epoch: AgentEpoch | None = None


class Heartbeat(Message):
    type: Literal["heartbeat"] = "heartbeat"
    agent_id: str = Field(min_length=1, max_length=MAX_ID_CHARS)
    at: Epoch | None = None
    epoch: AgentEpoch | None = None


AgentEvent = Annotated[
    TransitionEvent | TurnsEvent | CallEvent | HangupEvent | Heartbeat, Field(discriminator="type")
]


class Tombstone(Message):
    """A refused event that said its ``seq``: the inbox orders it like any event with that
    seq and applies it as a recorded refusal, so the events behind it go on (see
    ``workflows/intake.py``). Also what stands in for an event too large to hold."""

    type: Literal["refused"] = "refused"
    event_id: str | None = None
    seq: int
    reason: str
    epoch: int | None = None  # the epoch the refused event named, when it named a usable one


# What the inbox holds and hands on in order (a heartbeat is never ordered or held).
InboxEvent = Annotated[
    TransitionEvent | TurnsEvent | CallEvent | HangupEvent | Heartbeat | Tombstone,
    Field(discriminator="type"),
]


class EventBatch(Message):
    events: list[AgentEvent] = Field(max_length=MAX_BATCH)


class RejectedEvent(Message):
    """An event the workflow refused, and why (the ``state`` query shows the newest)."""

    event_id: str | None
    reason: str
    at: Epoch | None = None
