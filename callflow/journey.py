"""A journey as the flow and the engine see it: the follow-up a call asks for, and what a
call of a journey starts with.

A journey (``workflows/journey.py``) is one person's calls of one flow. The flow says
where a callback starts (``journey: {callback_node}``) and when the next call is due
(``follow_up`` on an end node, or a handler's ``flow_manager.state["follow_up"]``); the
engine starts a journey's call on the node the journey names, with the journey's state, the
first words it is to say and a short context of the earlier calls in the LLM's prompt. Pure
models and parsing (no clock, no timezone data): the follow-up's instant is found by an
activity (``activities/journeys.py``), which knows the person's timezone and window.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d|w)$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AT = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")
MAX_CONTEXT_CHARS = 2000  # the earlier calls' context in a journey call's prompt
MAX_SAY_CHARS = 500
MAX_FOLLOW_UP_DELAY_S = 90 * 86400


def duration_s(text: str) -> float:
    """``2d``, ``90m``, ``1.5h`` in seconds; ValueError naming the text otherwise."""
    m = _DURATION.match(str(text).strip().lower())
    if not m:
        raise ValueError(f"duration '{str(text)[:32]}': use a number and s, m, h, d or w, e.g. 2d or 30m")
    return float(m.group(1)) * _UNITS[m.group(2)]


def at_minutes(text: str) -> int:
    """``10:00`` as minutes after midnight; ValueError naming the text otherwise."""
    m = _AT.match(str(text).strip())
    if not m:
        raise ValueError(f"time '{str(text)[:32]}': use HH:MM (24-hour), e.g. 10:00")
    return int(m.group(1)) * 60 + int(m.group(2))


class FollowUp(BaseModel):
    """The next call of the journey: ``after`` a delay from the end of this call, ``at`` a
    wall-clock time in the person's timezone (on the day the delay reaches, or the next
    one), within the person's calling window; starting at ``node`` (the flow's start node
    when omitted) and saying ``say`` first (the node's greeting when omitted)."""

    model_config = ConfigDict(extra="forbid")

    after: str | None = None
    at: str | None = None
    node: str | None = Field(None, max_length=64)
    say: str | None = Field(None, max_length=MAX_SAY_CHARS)

    @field_validator("after")
    @classmethod
    def _after(cls, value: str | None) -> str | None:
        if value is not None and not 0 <= duration_s(value) <= MAX_FOLLOW_UP_DELAY_S:
            raise ValueError(f"duration '{value}' is over {MAX_FOLLOW_UP_DELAY_S // 86400} days")
        return value

    @field_validator("at")
    @classmethod
    def _at(cls, value: str | None) -> str | None:
        if value is not None:
            at_minutes(value)
        return value

    def delay_s(self) -> float:
        return duration_s(self.after) if self.after else 0.0


class JourneySpec(BaseModel):
    """The flow's ``journey:`` key: where a callback from the person starts."""

    model_config = ConfigDict(extra="forbid")

    callback_node: str | None = Field(None, max_length=64)


class JourneyContext(BaseModel):
    """What a journey's call carries in its state: whose journey, which call of it, what
    happened before (put after the node's prompt) and the first words to say."""

    model_config = ConfigDict(frozen=True)

    journey_id: str
    call: int = Field(1, ge=1)  # this call's number in the journey, from 1
    context: str = Field("", max_length=MAX_CONTEXT_CHARS)
    say: str | None = Field(None, max_length=MAX_SAY_CHARS)


class JourneyStart(BaseModel):
    """A journey call's start, in its ``CallInput``: the node, the journey's carried state
    and extracted values, and its context."""

    model_config = ConfigDict(extra="forbid")

    context: JourneyContext
    node: str | None = None
    state: dict[str, Any] = {}
    extracted: dict[str, Any] = {}


def requested_follow_up(value: Any) -> FollowUp | str | None:
    """A follow-up a handler asked for (``flow_manager.state["follow_up"]``): the FollowUp,
    a message saying what was wrong, or None when none was asked for."""
    if value is None:
        return None
    try:
        return FollowUp.model_validate(value)
    except ValueError as exc:
        return f"state.follow_up is not a follow-up ({{after, at, node, say}}): {str(exc)[:300]}"


def with_context(prompt: str, journey: JourneyContext | None) -> str:
    """The node's prompt, followed by the earlier calls' context on a journey's call."""
    if journey is None or not journey.context:
        return prompt
    return (
        f"{prompt}\n\nEarlier calls with this person (call {journey.call} of the journey):\n{journey.context}"
    )
