"""The agent's outbox journal in Redis, read back for the workflow (issue 13).

An agent holds transcript turns in its outbox for up to a heartbeat interval so that they
ride with the next event Temporal must see at once (``agents/outbox.py``, "Coalescing"):
that is most of the signals a call no longer sends. What makes the long hold safe is this
journal: every event the agent queues is appended here first (``agents/journal.py``) and
trimmed once the workflow has it, so a stream holds only what the workflow has not been
sent yet. When the agent dies, the workflow reads what it left (on the next agent's attach,
before dispatching another, and before recording a call that ended without the agent's
hang-up) and applies it through its inbox like any signal, so seq and event-id
deduplication make a replay harmless.

One Redis stream per call, ``ringflow:journal:<call id>``; each entry has ``e``, the event
as the signal would carry it (JSON), and ``t``, the outbox ticket. Entry ids are
``<epoch ms>-<ticket>``: increasing within one agent, and above every entry an earlier
agent left, so an agent trims what the workflow has with one ``XTRIM MINID``. Keys expire a
day after their last write: the journal is a buffer, not a record.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, Field, TypeAdapter, ValidationError
from temporalio import activity

from ringflow.workflows.contract import MAX_SIGNAL_BYTES, AgentEvent, encoded_bytes

log = logging.getLogger(__name__)

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


class TurnJournalReader:
    """The ``read_turn_journal`` activity; without Redis there is no journal to read."""

    def __init__(self, redis_url: str | None) -> None:
        self.redis_url = redis_url
        self._redis: Any = None

    def _client(self, url: str) -> Any:
        if self._redis is None:
            from redis.asyncio import Redis

            self._redis = Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        return self._redis

    @activity.defn(name="read_turn_journal")
    async def read_turn_journal(self, req: JournalRead) -> JournalEntries:
        if not self.redis_url:
            return JournalEntries()
        rows = await self._client(self.redis_url).xrange(journal_key(req.call_id), count=MAX_READ + 1)
        return entries_from(rows, req.next_seq)


def entries_from(rows: list[Any], next_seq: int) -> JournalEntries:
    """The events of ``rows`` (XRANGE's answer) the workflow may not have: heartbeats are
    not journaled; a sequenced event below ``next_seq`` was applied already. Bounded to what
    one activity result may carry (a signal's size, like the batch the agent would have sent)."""
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
    if out.unreadable:
        log.warning("turn journal: %d unreadable entries skipped", out.unreadable)
    return out
