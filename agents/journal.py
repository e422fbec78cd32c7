"""The outbox's journal: every event the agent queues for the workflow, in Redis first.

Turns wait in the outbox for up to a heartbeat interval (``agents/outbox.py``,
"Coalescing"), so that a call sends Temporal a signal per state change instead of one per
turn. Held in memory only, a crash would lose them; appended to the call's Redis stream as
they are queued, they outlive the agent, and the workflow reads back what it was never sent
(``activities/turn_journal.py``). Once the outbox has delivered an event its entry is
trimmed, so the stream holds the undelivered tail and stays small.

The audio loop never waits for Redis: ``record`` and ``delivered`` append to a queue a
writer task drains, one pipeline per wake-up. While Redis fails the journal is not
``healthy`` and the outbox falls back to its short linger (``on_unhealthy`` kicks it), so a
Redis outage costs signals, never turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ringflow.agents.signals import built
from ringflow.contract.journal import JOURNAL_TTL_S, encode_event, journal_key

log = logging.getLogger(__name__)

MAX_QUEUED = 10_000  # ops waiting for Redis; past it the journal gives up (unhealthy) until drained


class OutboxJournal:
    """Appends queued events to ``ringflow:journal:<call id>`` and trims delivered ones."""

    def __init__(self, redis: Any, call_id: str, ttl_s: int = JOURNAL_TTL_S) -> None:
        self.redis = redis
        self.key = journal_key(call_id)
        self.ttl_s = ttl_s
        self.healthy = True
        self.on_unhealthy: Callable[[], None] | None = None
        self.written = 0
        self.failures = 0
        self._ops: deque[tuple[int, Any]] = deque()  # (ticket, event) or (-ticket, None): delivered
        self._wake = asyncio.Event()
        self._drained = asyncio.Event()  # set whenever nothing waits to be written
        self._epoch: int | None = None
        self._expired_at = float("-inf")  # when the key's expiry was last set (monotonic)
        self._task: asyncio.Task[None] | None = None

    # --- the outbox's side (synchronous, on the hot path) ----------------------------------
    def record(self, ticket: int, event: Any) -> None:
        if len(self._ops) >= MAX_QUEUED:
            self._unhealthy(RuntimeError(f"{MAX_QUEUED} journal writes waiting"))
            return
        self._ops.append((ticket, event))
        self._drained.clear()
        self._wake.set()

    def delivered(self, ticket: int) -> None:
        """Every event up to ``ticket`` is in the workflow: its entries may go."""
        self._ops.append((-ticket, None))
        self._drained.clear()
        self._wake.set()

    # --- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="ringflow-journal")

    async def close(self, timeout: float = 2.0, drop: bool = False) -> None:
        """Write what waits (the delivered marks, mostly), then stop; with ``drop`` (the
        outbox delivered everything: the call is over) the stream goes too."""
        task = self._task
        if task is not None and not task.done():
            if self._ops:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self._drained.wait()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if drop and self.healthy:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(timeout):
                    await self.redis.delete(self.key)

    def abandon(self) -> None:
        """Stop at once, as a crash would: what was written stays for the workflow."""
        if self._task is not None:
            self._task.cancel()

    # --- writer ----------------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._ops:
                ops = list(self._ops)
                try:
                    await self._write(ops)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self._unhealthy(exc)
                    for _ in ops:  # not retried: the outbox sends them now (kicked)
                        self._ops.popleft()
                    await asyncio.sleep(0.5)  # Redis is down: don't spin
                    continue
                for _ in ops:
                    self._ops.popleft()
                if not self.healthy:
                    log.info("turn journal writes to Redis again")
                self.healthy = True
            self._drained.set()

    async def _write(self, ops: list[tuple[int, Any]]) -> None:
        if self._epoch is None:
            self._epoch = await self._first_epoch()
        pipe = self.redis.pipeline(transaction=False)
        trim = 0
        adds = 0
        for ticket, event in ops:
            if ticket < 0:
                trim = max(trim, -ticket)
                continue
            (ev,) = built([event])
            pipe.xadd(self.key, {"e": encode_event(ev), "t": ticket}, id=f"{self._epoch}-{ticket}")
            adds += 1
        now = time.monotonic()
        if adds and now - self._expired_at > self.ttl_s / 4:  # refreshed now and then, not per write
            pipe.expire(self.key, self.ttl_s)
            self._expired_at = now
        if trim:
            # Everything of this agent up to ``trim`` and everything earlier agents left (the
            # workflow read those when this agent attached) is in the workflow now.
            pipe.xtrim(self.key, minid=f"{self._epoch}-{trim + 1}", approximate=False)
        await pipe.execute()
        self.written += adds

    async def _first_epoch(self) -> int:
        """Above every entry already in the stream, so that this agent's ids increase past an
        earlier agent's even when clocks differ."""
        now = int(time.time() * 1000)
        last = await self.redis.xrevrange(self.key, count=1)
        if last:
            raw = last[0][0]
            ms = int((raw.decode() if isinstance(raw, bytes) else str(raw)).split("-")[0])
            now = max(now, ms + 1)
        return now

    def _unhealthy(self, exc: BaseException) -> None:
        self.failures += 1
        if self.healthy:
            log.warning("turn journal: Redis write failed, turns go without lingering: %r", exc)
        self.healthy = False
        if self.on_unhealthy is not None:
            self.on_unhealthy()
