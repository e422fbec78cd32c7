"""The ``read_turn_journal`` activity: the agent's outbox journal in Redis, read back for
the workflow (the stream's format: ``ringflow/contract/journal.py``).

An agent holds transcript turns in its outbox for up to a heartbeat interval so that they
ride with the next event Temporal must see at once (``agents/outbox.py``, "Coalescing"):
that is most of the signals a call no longer sends. What makes the long hold safe is this
journal: every event the agent queues is appended first (``agents/journal.py``) and
trimmed once the workflow has it, so a stream holds only what the workflow has not been
sent yet. When the agent dies, the workflow reads what it left (on the next agent's attach,
before dispatching another, and before recording a call that ended without the agent's
hang-up) and applies it through its inbox like any signal, so seq and event-id
deduplication make a replay harmless.
"""

from __future__ import annotations

import logging
from typing import Any

from temporalio import activity

from ringflow.contract.journal import MAX_READ, JournalEntries, JournalRead, entries_from, journal_key

log = logging.getLogger(__name__)


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
        out = entries_from(rows, req.next_seq)
        if out.unreadable:
            log.warning("turn journal: %d unreadable entries skipped", out.unreadable)
        return out
