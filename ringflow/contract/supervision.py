"""Supervisors on a live call: what ``ringflow call whisper|takeover|handback`` asks the
call's workflow (the ``supervise`` update), and what the workflow keeps of it (the
``supervision`` query, polled by the call's agent).

Every action is a durable event of the call's workflow, numbered there: the agent applies
each in order at a point of its own events (a ``supervisor`` event, ``callflow/events.py``),
so a takeover outlives a crash of the agent, and the agent that replaces it starts paused.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ringflow.contract.wire import MAX_ID_CHARS, MAX_NAME_CHARS, Answer, Message

SupervisorKind = Literal["whisper", "takeover", "handback"]
MAX_WHISPER_CHARS = 2_000
KEPT_ACTIONS = 50  # the newest kept in the workflow's state (an agent collects them within a second)


class SupervisorRequest(Message):
    """``whisper`` takes ``text`` (the hint for the bot's next turn); ``handback`` may name
    ``node`` (where the bot resumes; none: where it was). ``by`` says who, for the record."""

    action: SupervisorKind
    text: str | None = Field(None, min_length=1, max_length=MAX_WHISPER_CHARS)
    node: str | None = Field(None, min_length=1, max_length=MAX_NAME_CHARS)
    by: str | None = Field(None, max_length=MAX_ID_CHARS)


class SupervisorStep(Answer):
    """One action as the workflow took it: its number, when, and what it asked."""

    id: int
    action: SupervisorKind
    text: str | None = None
    node: str | None = None
    by: str | None = None
    at: float


class Supervision(Answer):
    """The call's supervisors as its workflow holds them. ``takeover``: a person has the
    call since ``since`` (the flow's time limit pauses; ``RingflowStatus = takeover``);
    ``paused_s``: how long earlier takeovers lasted, added to the time limit."""

    takeover: bool = False
    since: float | None = None
    paused_s: float = 0.0
    next_id: int = 1
    actions: list[SupervisorStep] = []

    def after(self, seen: int) -> list[SupervisorStep]:
        """The actions an agent that applied up to ``seen`` has still to apply, in order."""
        return [a for a in self.actions if a.id > seen]


class SupervisorAnswer(Answer):
    """The ``supervise`` update's answer: the action's number and the call's supervision."""

    step: SupervisorStep
    supervision: Supervision


# A takeover's lines as the bot's LLM context holds them (assistant messages), so that at the
# hand-back it reads who said what (callflow/engine.HANDBACK_INSTRUCTIONS names the mark).
SUPERVISOR_MARK = "[supervisor]"
WHISPER_PREFIX = "(A supervisor's hint for your next turn; the caller does not hear it: "


def whisper_note(text: str) -> str:
    """A whisper as the bot's LLM context holds it (a system message), and as the transcript
    keeps it (a system turn), so that an agent taking over rebuilds the same context."""
    return f"{WHISPER_PREFIX}{text})"
