"""The agent's outbox journal in Redis, as its writer (``agents/journal.py``) and its
readers (the ``read_turn_journal`` activity, ``ringflow call transcript --live``) agree on it.

One Redis stream per call, ``ringflow:journal:<call id>``; each entry has ``e``, the event
as the signal would send it (JSON), and ``t``, the outbox ticket. Entry ids are
``<epoch ms>-<ticket>``: increasing within one agent, and above every entry an earlier
agent left, so an agent trims what the workflow has with one ``XTRIM MINID``. Keys expire a
day after their last write: the journal is a buffer, not a record.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from ringflow.contract.events import AgentEvent
from ringflow.contract.wire import MAX_SIGNAL_BYTES, encoded_bytes

JOURNAL_TTL_S = 24 * 3600
MAX_READ = 2000  # entries one read takes: far more than a heartbeat interval of talk
_EVENT: TypeAdapter[Any] = TypeAdapter(AgentEvent)


def journal_key(call_id: str) -> str:
    return f"ringflow:journal:{call_id}"


def encode_event(event: BaseModel) -> bytes:
    return event.model_dump_json().encode()


def decode_event(raw: bytes) -> Any:
    """An entry's event; raises ``ValidationError`` for one that is not an agent event."""
    return _EVENT.validate_json(raw)


class JournalRead(BaseModel):
    call_id: str = Field(min_length=1, max_length=200)
    next_seq: int = Field(ge=0)  # the workflow's inbox: sequenced events below it it has


class JournalEntries(BaseModel):
    """What an agent queued and the workflow was never sent, in the order it was queued."""

    events: list[AgentEvent] = Field(default_factory=list)
    unreadable: int = 0  # entries that were not agent events (skipped, counted)
    left: int = 0  # entries past what one read may return (not recovered; counted)


def entries_from(rows: list[Any], next_seq: int) -> JournalEntries:
    """The events of ``rows`` (XRANGE's answer) the workflow may not have: heartbeats are
    not journaled; a sequenced event below ``next_seq`` was applied already. Bounded to what
    one activity result may hold (a signal's size, like the batch the agent would have sent)."""
    out = JournalEntries(left=max(0, len(rows) - MAX_READ))
    size = 0
    for _, fields in rows[:MAX_READ]:
        raw = (fields or {}).get(b"e") or (fields or {}).get("e")
        try:
            event = decode_event(raw if isinstance(raw, bytes) else str(raw).encode())
        except (ValidationError, ValueError):
            out.unreadable += 1
            continue
        seq = getattr(event, "seq", None)
        if seq is not None and seq < next_seq:
            continue
        size += encoded_bytes(event)
        if size > MAX_SIGNAL_BYTES:
            out.left += 1
            continue
        out.events.append(event)
    return out
