"""Turning whatever arrives as a signal into events the inbox can apply, or refusals.

Signals reach the workflow as raw payloads (``RawValue``) through one dynamic handler, so
no payload can fail a workflow task: a missing payload, several payloads, one that is not
JSON (``encoding=binary/plain``), one of the wrong shape or with out-of-range numbers, and
a signal name the workflow does not know are all refusals the workflow records and gets
past. A refused event that still names its ``seq`` becomes a *tombstone*: the inbox
applies it in its place, so the events behind it are not held forever waiting for a seq
that will never come. Pure and deterministic, like the inbox.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from ringflow.callflow.safe_text import scrub
from ringflow.contract.events import (
    AgentEvent,
    CallEvent,
    HangupEvent,
    Heartbeat,
    InboxEvent,
    Tombstone,
    TransitionEvent,
    TurnsEvent,
)
from ringflow.contract.wire import MAX_BATCH, MAX_SEQ

# The agent sends ``events`` batches only; the single-event signals stay: recorded histories
# and agents of earlier releases use them (a replay must apply them as it did), ``hangup``
# is the operator's (``call hangup``, ``temporal workflow signal --name hangup``), and the
# tests and benches drive calls with them.
SIGNALS: dict[str, type[TransitionEvent | TurnsEvent | CallEvent | HangupEvent | Heartbeat]] = {
    "transition": TransitionEvent,
    "turns": TurnsEvent,
    "event": CallEvent,
    "hangup": HangupEvent,
    "heartbeat": Heartbeat,
}
BATCH_SIGNAL = "events"
_EVENT: TypeAdapter[InboxEvent] = TypeAdapter(AgentEvent)


class Refusal(BaseModel):
    """An input the workflow could not take, with what identifies it (when it said)."""

    event_id: str | None = None
    seq: int | None = None
    reason: str
    epoch: int | None = None  # the agent epoch it named: a replaced agent's refusal takes no seq


def explain(exc: ValidationError) -> str:
    """The first problems of a validation error, by field, without the input's values:
    the reason is kept in the workflow's state, where payload text does not belong."""
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err["loc"]) or "payload"
        parts.append(f"{loc}: {err['msg']}")
    more = len(exc.errors()) - 3
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def _identity(raw: Any) -> tuple[str | None, int | None]:
    """The event id and seq a malformed event claims, when they are usable as such."""
    if not isinstance(raw, dict):
        return None, None
    eid, seq = raw.get("event_id"), raw.get("seq")
    event_id = eid if isinstance(eid, str) and 0 < len(eid) <= 128 else None
    good_seq = type(seq) is int and 1 <= seq <= MAX_SEQ
    return event_id, seq if good_seq else None


def _epoch(raw: Any) -> int | None:
    epoch = raw.get("epoch") if isinstance(raw, dict) else None
    return epoch if type(epoch) is int and 1 <= epoch <= MAX_SEQ else None


def _refuse(raw: Any, what: str, reason: str) -> Refusal:
    event_id, seq = _identity(raw)
    return Refusal(event_id=event_id, seq=seq, reason=f"malformed {what}: {reason}", epoch=_epoch(raw))


def _one(model: type[InboxEvent] | TypeAdapter[InboxEvent], raw: Any, what: str) -> InboxEvent | Refusal:
    try:
        if isinstance(model, TypeAdapter):
            return model.validate_python(raw)
        return model.model_validate(raw)
    except ValidationError as exc:
        return _refuse(raw, what, explain(exc))


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _read(decode: Callable[[Any], Any], raw: Any) -> Any:
    """One payload as a plain value, NUL and lone surrogates replaced (``callflow/safe_text.py``).

    The converter's JSON parser refuses a lone surrogate escape (``\ud800``) outright, which
    lost the whole turn around it; JSON text it refuses is read again by the standard
    parser, which takes it (and nothing that is not JSON: ``NaN`` stays refused)."""
    try:
        return scrub(decode(raw))
    except Exception:
        payload = getattr(raw, "payload", None)
        if payload is None or payload.metadata.get("encoding") != b"json/plain":
            raise
        return scrub(json.loads(payload.data, parse_constant=_no_constant))


def intake(name: str, payloads: Sequence[Any], decode: Callable[[Any], Any]) -> list[InboxEvent | Refusal]:
    """The events a signal carries, in order, each validated, or why each was refused.

    ``decode`` turns one raw payload into a plain value (the workflow's payload converter
    with no type hint) and may raise on a payload it cannot read."""
    if name != BATCH_SIGNAL and name not in SIGNALS:
        return [Refusal(reason=f"unknown signal '{name[:64]}'")]
    if len(payloads) != 1:
        return [Refusal(reason=f"signal '{name}' needs exactly one payload, got {len(payloads)}")]
    try:
        raw = _read(decode, payloads[0])
    except Exception as exc:  # any converter failure: the payload is unreadable, nothing more
        return [Refusal(reason=f"signal '{name}': unreadable payload ({type(exc).__name__})")]
    if name != BATCH_SIGNAL:
        return [_one(SIGNALS[name], raw, f"'{name}' signal")]
    events = raw.get("events") if isinstance(raw, dict) else None
    if not isinstance(events, list) or set(raw) != {"events"}:
        return [
            Refusal(reason="malformed 'events' signal: expected an object whose one key, 'events', is a list")
        ]
    if len(events) > MAX_BATCH:
        # Refused whole, but each event that names its seq keeps its place.
        return [
            _refuse(e, "event", f"the batch has {len(events)} events; the limit is {MAX_BATCH}")
            for e in events[: MAX_BATCH * 10]
        ]
    return [_one(_EVENT, e, f"event {i} of an 'events' signal") for i, e in enumerate(events)]


def intake_one(
    name: str, payloads: Sequence[Any], decode: Callable[[Any], Any], model: type[BaseModel]
) -> BaseModel | Refusal:
    """One payload of ``model`` (a signal the inbox does not order, e.g. ``room_event``)."""
    if len(payloads) != 1:
        return Refusal(reason=f"signal '{name}' needs exactly one payload, got {len(payloads)}")
    try:
        raw = _read(decode, payloads[0])
    except Exception as exc:
        return Refusal(reason=f"signal '{name}': unreadable payload ({type(exc).__name__})")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        return _refuse(raw, f"'{name}' signal", explain(exc))


M = TypeVar("M", bound=BaseModel)


def read_request(name: str, raw: Any, decode: Callable[[Any], Any], model: type[M]) -> M | Refusal:
    """An update's one payload (``raw``, or ``None`` when it came with none) as ``model``,
    or why it cannot be: the update's handler records the refusal in the call's state and
    fails the update with it (a validator may not write state, and a rejected update
    leaves nothing in the history to replay it from)."""
    if raw is None:
        return Refusal(reason=f"update '{name}' needs exactly one payload, got none")
    try:
        value = _read(decode, raw)
    except Exception as exc:
        return Refusal(reason=f"update '{name}': unreadable payload ({type(exc).__name__})")
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        return _refuse(value, f"'{name}' request", explain(exc))


def tombstone(refusal: Refusal, seq: int) -> Tombstone:
    """The stand-in the inbox orders like any event with this seq (and applies as a
    recorded refusal), so the events behind a refused one go on."""
    return Tombstone(event_id=refusal.event_id, seq=seq, reason=refusal.reason, epoch=refusal.epoch)
