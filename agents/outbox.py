"""The agent's outbox to its CallWorkflow: ordered, retried, bounded, never blocking audio.

The audio loop produces events (turns, transitions, line events, heartbeats) and must never
wait on Temporal: a slow or unreachable server would stall speech. So ``put`` is a plain
synchronous append, and one background task drains the queue into ``events`` signals.

Guarantees, and why they are enough:

* **Order.** Events are sent strictly in ``put`` order, at most ``max_batch`` per ``send``.
  A batch stays in flight until ``send`` returns; it is never re-cut, merged or reordered.
* **No loss while the process lives.** A failed ``send`` (any exception: ``RPCError``,
  connection refused, a timeout) is retried with the *same* batch, with exponential backoff
  and jitter capped at ``max_backoff_s``, forever, until ``close``/``abandon``. So a Temporal
  outage of any length (the requirement is 60 s) costs latency, not events. The one
  exception is :class:`ReceiverGone` (the call's workflow has completed): no retry can
  succeed, so the outbox stops and tells its owner through ``on_error``.
* **Duplicates are harmless.** A ``send`` that timed out or failed after the server took the
  signal is sent again; the workflow's inbox applies each ``event_id`` once and sequenced
  events in ``seq`` order (``workflows/inbox.py``), so at-least-once delivery here becomes
  exactly-once application there.
* **Bounded.** At most ``max_events`` events wait; past that ``put`` raises
  :class:`OutboxFull` and keeps what is queued. A full outbox means the workflow has been
  unreachable for a long time; the caller decides (usually: end the call), rather than the
  outbox silently dropping the oldest events or growing without limit.
* **Hung sends are bounded.** Each ``send`` runs under ``asyncio.timeout(send_timeout_s)``
  and a timeout counts as a failure, so a half-open connection cannot stall the queue.

Heartbeat coalescing: heartbeats carry no ``seq`` and only tell the workflow the agent is
alive, so among heartbeats still waiting (not yet in a batch being sent) only the newest is
kept: a new heartbeat supersedes the older pending one and takes its own place in the put
order. What is sent is therefore always a subsequence of what was put, in put order, missing
only superseded heartbeats. This keeps an outage of minutes from filling the outbox with
heartbeats; a heartbeat already in flight is never touched, so retries stay identical.

Coalescing (``linger_s`` > 0): a transcript turn is not worth a signal of its own; Temporal
only needs it durable by the time something depends on it. So when only turns wait, the
sender holds them up to ``linger_s`` (from the oldest) and they ride with the next event
that goes at once (a transition, a line event, a hang-up, a heartbeat), with ``flush``,
``kick`` (the controller calls it before a function-call update, which waits for every seq
before it), ``close``, or a full batch. Order is untouched: a send carries everything put
before it (up to ``max_batch``), so a crash loses no turn put before the last successful
send; what it can lose is what was put after it, as before, now for up to ``linger_s``.
With a ``journal`` (``agents/journal.py``) every event is also written to Redis as it is
put, so a crash loses nothing written there: the workflow reads it back. While the journal
is healthy, turns linger ``journaled_linger_s`` (the heartbeat interval: a call then sends
Temporal one signal per state change or interval, not one per turn).

Heartbeat suppression (``heartbeat_quiet_s`` > 0): any delivered event tells the workflow
the agent is alive, so a heartbeat put within ``heartbeat_quiet_s`` of the last successful
send is not queued at all, and one put while other events wait sends them now in its place
(lingering turns included: a sign of life never waits for a linger). Heartbeats go only on
a call where nothing else went out for a whole interval, and while sends succeed no two are
further apart than the interval plus the agent's heartbeat period.

Not thread-safe: call ``put`` from the event loop's thread (LiveKit's agent callbacks run
there). Without a journal, events queued here are lost if the process dies (``abandon``
simulates that); the workflow then re-dispatches an agent, which resumes from the
workflow's ``Snapshot``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from time import monotonic

from ringflow.agents.delivery import (
    COVER,
    EVENT,
    LIVE,
    PUT_AT,
    Journal,
    OutboxClosed,
    OutboxFull,
    Queued,
    ReceiverGone,
    Slot,
    backoff_delay,
    cancelling,
)
from ringflow.contract.events import AgentEvent, Heartbeat, TurnsEvent
from ringflow.contract.wire import MAX_BATCH

__all__ = ["Journal", "Outbox", "OutboxClosed", "OutboxFull", "ReceiverGone", "Send", "backoff_delay"]

log = logging.getLogger(__name__)

Send = Callable[[list[AgentEvent]], Awaitable[None]]

DEFAULT_SEND_TIMEOUT_S = 10.0


class Outbox:
    """Queue of agent events drained in order into the workflow by one background task."""

    # Slots: an outbox has as many attributes as CPython 3.11 keeps inline in an instance
    # (30), past which each read in ``put`` would be a dict lookup.
    __slots__ = (
        "_acked_ticket",
        "_closed",
        "_hb",
        "_inflight",
        "_kicked",
        "_last_ok",
        "_last_ticket",
        "_live",
        "_queue",
        "_send",
        "_sleeper",
        "_stopped",
        "_task",
        "_urgent",
        "_waiters",
        "gone",
        "heartbeat_quiet_s",
        "heartbeats_skipped",
        "initial_backoff_s",
        "journal",
        "journaled_linger_s",
        "last_acked_seq",
        "linger_s",
        "max_backoff_s",
        "max_batch",
        "max_events",
        "on_error",
        "send_errors",
        "send_timeout_s",
        "sent_events",
    )

    def __init__(
        self,
        send: Send,
        *,
        max_events: int = 10_000,
        max_batch: int = 50,
        initial_backoff_s: float = 0.05,
        max_backoff_s: float = 2.0,
        on_error: Callable[[BaseException], None] | None = None,
        send_timeout_s: float = DEFAULT_SEND_TIMEOUT_S,
        linger_s: float = 0.0,
        heartbeat_quiet_s: float = 0.0,
        journal: Journal | None = None,
        journaled_linger_s: float = 0.0,
    ) -> None:
        if max_events < 1:
            raise ValueError("max_events must be at least 1")
        if not 1 <= max_batch <= MAX_BATCH:
            raise ValueError(f"max_batch must be between 1 and {MAX_BATCH} (the workflow's batch limit)")
        if initial_backoff_s <= 0 or max_backoff_s < initial_backoff_s:
            raise ValueError("need 0 < initial_backoff_s <= max_backoff_s")
        if send_timeout_s <= 0:
            raise ValueError("send_timeout_s must be positive")
        if linger_s < 0 or heartbeat_quiet_s < 0 or journaled_linger_s < 0:
            raise ValueError("linger_s, heartbeat_quiet_s and journaled_linger_s must not be negative")
        self._send = send
        self.max_events = max_events
        self.max_batch = max_batch
        self.initial_backoff_s = initial_backoff_s
        self.max_backoff_s = max_backoff_s
        self.send_timeout_s = send_timeout_s
        self.linger_s = linger_s
        self.heartbeat_quiet_s = heartbeat_quiet_s
        self.journal = journal
        self.journaled_linger_s = journaled_linger_s
        self._urgent = 0  # queued live events that end a linger (all but turns)
        self._kicked = False  # kick(): send what waits without lingering
        self._last_ok = float("-inf")  # monotonic time of the last successful send
        self.heartbeats_skipped = 0
        self.on_error = on_error  # settable later: the owner may exist only after its outbox
        self.gone: ReceiverGone | None = None  # why the outbox stopped on its own, if it did
        self._queue: deque[Queued | Slot] = deque()  # may hold dead (superseded) heartbeats
        self._inflight: list[Queued | Slot] = []  # the batch being sent; kept identical across retries
        self._hb: Slot | None = None  # the pending heartbeat a newer one would supersede
        self._live = 0  # live events in queue + in flight
        self._last_ticket = 0
        self._acked_ticket = 0  # every ticket up to this one is delivered (or superseded)
        self._waiters: list[tuple[int, asyncio.Future[bool]]] = []
        self._sleeper: asyncio.Future[None] | None = None  # the idle sender waits on it
        self._task: asyncio.Task[None] | None = None
        self._closed = False  # no more puts
        self._stopped = False  # no more sends
        self.sent_events = 0
        self.send_errors = 0
        self.last_acked_seq: int | None = None

    # --- producer side (the audio loop) -----------------------------------------------
    def put(self, event: AgentEvent) -> None:
        """Queue ``event``; never awaits. Raises :class:`OutboxFull` when ``max_events`` are
        waiting (nothing queued is dropped) and :class:`OutboxClosed` after close/abandon.

        This runs on the transition hot path, so it is an append (of a plain tuple, see
        ``delivery.Queued``) and, when the sender is
        asleep, one wake-up (``_wake``'s body, written out here: a method call less, and no
        ``done()`` before ``set_result``: a try costs nothing until it raises): no clock
        other than the slot's age, no isinstance on pydantic classes (an exact type test;
        agent events are final classes)."""
        if self._closed:
            raise OutboxClosed("the outbox is closed")
        kind = type(event)
        if kind is Heartbeat:
            self._put_heartbeat(event)  # type: ignore[arg-type]
            return
        live = self._live
        if live >= self.max_events:
            raise OutboxFull(f"{live} events waiting for the workflow (max_events={self.max_events})")
        self._last_ticket = ticket = self._last_ticket + 1
        self._queue.append((ticket, event, monotonic(), True, ticket))
        self._live = live = live + 1
        if self.journal is not None:
            self.journal.record(ticket, event)
        sleeper = self._sleeper
        if sleeper is None:
            if kind is not TurnsEvent:
                self._urgent += 1
            return  # the sender is awake: it sees the queue before it sleeps again
        if kind is not TurnsEvent:
            self._urgent += 1
        elif (self.linger_s or self.journaled_linger_s) and live < self.max_batch and live != 1:
            return  # a turn that may linger, behind others: the sender's linger clock runs
        self._sleeper = None
        try:
            sleeper.set_result(None)
        except asyncio.InvalidStateError:
            pass  # cancelled with the sender, which has not run its finally yet: nobody to wake

    def kick(self) -> None:
        """Send what waits now, without lingering (before an update that waits for it)."""
        if self._live:
            self._kicked = True
            self._wake()

    def _put_heartbeat(self, event: Heartbeat) -> None:
        if self.heartbeat_quiet_s:
            if time.monotonic() - self._last_ok < self.heartbeat_quiet_s:
                self.heartbeats_skipped += 1  # what just went out proves the agent alive
                return
            if self._live > (self._hb is not None):
                # What waits proves the agent alive as well, but only once it goes: turns
                # lingering for company would hold that sign back up to another interval
                # (silence then reached the agent timeout: 20 s quiet, a turn put just
                # before the heartbeat, 20 s of linger), so they go now in its place.
                self.heartbeats_skipped += 1
                self.kick()
                return
        hb = self._hb
        if hb is not None:
            self._last_ticket += 1
            if self._queue and self._queue[-1] is hb:
                hb.event, hb.ticket = event, self._last_ticket  # newest already last: replace
                return
            # Supersede: the old one is skipped when reached, the new one stands for it in
            # flush and age. Dead slots are bounded by the live events between them.
            hb.live = False
            slot = Slot((self._last_ticket, event, hb.put_at, True, hb.cover))
            self._hb = slot
            self._queue.append(slot)
            self._wake()
            return
        if self._live >= self.max_events:
            raise OutboxFull(f"{self._live} events waiting for the workflow (max_events={self.max_events})")
        self._last_ticket += 1
        self._hb = Slot((self._last_ticket, event, time.monotonic(), True, self._last_ticket))
        self._queue.append(self._hb)
        self._live += 1
        self._urgent += 1
        self._wake()

    def _wake(self) -> None:
        """Wake the sender if it sleeps; puts while it is awake cost nothing more."""
        sleeper = self._sleeper
        if sleeper is not None:
            self._sleeper = None
            if not sleeper.done():
                sleeper.set_result(None)

    # --- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        """Start the sender task on the running loop (call from async code)."""
        if self._task is not None:
            raise RuntimeError("the outbox is already started")
        if self._closed:
            raise OutboxClosed("the outbox is closed")
        self._task = asyncio.get_running_loop().create_task(self._run(), name="ringflow-outbox")
        if self.journal is not None:
            self.journal.start()
        self._task.add_done_callback(self._task_done)

    async def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything put so far is acknowledged: True, or False on timeout or
        when the outbox stops first. Events put meanwhile are not waited for, so a steady
        stream of new events cannot keep a flush from finishing. Before ``start`` it waits
        for the sender like any other caller."""
        target = self._last_ticket
        if self._acked_ticket >= target:
            return True
        if self._stopped:
            return False
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        waiter = (target, fut)
        self._waiters.append(waiter)
        self._wake()  # a lingering sender sends now: someone waits for it
        try:
            done, _ = await asyncio.wait({fut}, timeout=timeout)
            return bool(fut.result()) if done else False
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    async def close(self, flush_timeout: float = 5.0) -> None:
        """Refuse further puts, give the queue up to ``flush_timeout`` to drain, then stop.
        Whatever is still ``pending`` afterwards is lost (and logged), unless journaled."""
        self._closed = True
        task = self._task
        if task is not None and not task.done():
            if not await self.flush(flush_timeout):
                log.warning(
                    "outbox closed with %d events undelivered after %.1f s", self.pending, flush_timeout
                )
            self._stop()  # the sender also checks this, should a send swallow the cancel
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                if cancelling():
                    raise  # close() itself was cancelled: don't swallow that
        elif self._live:
            log.warning("outbox closed with %d events never sent (it was not running)", self._live)
        self._stop()
        if self.journal is not None:  # all delivered: the call's journal has nothing to keep
            await self.journal.close(drop=self._live == 0)

    def abandon(self) -> None:
        """Stop at once without flushing, as a crash would: pending events are never sent
        (``pending`` still counts them, to say what was lost)."""
        self._closed = True
        self._stop()
        if self._task is not None:
            self._task.cancel()
        if self.journal is not None:
            self.journal.abandon()  # what it wrote stays, for the workflow to read back

    # --- observation --------------------------------------------------------------------
    @property
    def pending(self) -> int:
        """Events not yet acknowledged, the batch in flight included."""
        return self._live

    @property
    def oldest_pending_age_s(self) -> float | None:
        """How long the oldest unacknowledged event has waited: the lag an alert watches."""
        oldest = [s[PUT_AT] for s in (*self._inflight[:1], self._live_head(), self._hb) if s is not None]
        return time.monotonic() - min(oldest) if oldest else None

    # --- sender task --------------------------------------------------------------------
    async def _run(self) -> None:
        attempt = 0
        while not self._stopped:
            if not self._inflight:
                linger = self._linger_left()
                if linger <= 0:
                    self._take_batch()
                if not self._inflight:
                    # No await since the queue was seen empty, so no put can slip in between.
                    self._sleeper = asyncio.get_running_loop().create_future()
                    try:
                        if linger > 0:
                            await asyncio.wait({self._sleeper}, timeout=linger)
                        else:
                            await self._sleeper
                    finally:
                        self._sleeper = None
                    continue
            batch = [s[EVENT] for s in self._inflight]
            try:
                # asyncio.timeout, not wait_for: on 3.11, wait_for returns (or raises) the send's
                # own outcome when a cancel lands as the send finishes, swallowing the cancel,
                # and close() then waits forever for a task that keeps retrying.
                async with asyncio.timeout(self.send_timeout_s):
                    await self._send(batch)
            except asyncio.CancelledError:
                if self._stopped or cancelling():
                    raise  # close/abandon
                self._failed(asyncio.CancelledError("send was cancelled"), attempt)
            except ReceiverGone as exc:
                self._give_up(exc)
                return
            except Exception as exc:  # TimeoutError included: a hung send is a failed send
                self._failed(exc, attempt)
            else:
                if attempt:
                    log.info("outbox delivered %d events after %d failed attempts", len(batch), attempt)
                self._acknowledge()
                attempt = 0
                continue
            if self._stopped:
                return
            await asyncio.sleep(backoff_delay(attempt, self.initial_backoff_s, self.max_backoff_s))
            attempt += 1

    def _linger_left(self) -> float:
        """How much longer the queued events may wait for company: > 0 only when nothing
        but turns waits, nobody flushes or kicked, the batch is not full, and the oldest turn
        has waited less than ``linger_s``."""
        linger = self.linger_s
        if self.journaled_linger_s and self.journal is not None and self.journal.healthy:
            linger = self.journaled_linger_s
        if (
            not linger
            or self._urgent
            or self._kicked
            or self._waiters
            or self._closed
            or self._live >= self.max_batch
        ):
            return 0.0
        head = self._live_head()
        if head is None:
            return 0.0
        return head[PUT_AT] + linger - time.monotonic()

    def _failed(self, exc: BaseException, attempt: int) -> None:
        self.send_errors += 1
        if attempt == 0:
            log.warning("outbox send of %d events failed, retrying: %r", len(self._inflight), exc)
        else:
            log.debug("outbox send retry %d failed: %r", attempt, exc)
        self._report(exc)

    def _give_up(self, exc: ReceiverGone) -> None:
        """The receiver is gone: stop as ``abandon`` does (``pending`` says what was not
        delivered), so that the owner hears of it once and can leave the call."""
        self.send_errors += 1
        self.gone = exc
        log.warning("outbox stopped, %d events undelivered: %s", self._live, exc)
        self._closed = True
        self._stop()
        self._report(exc)

    def _report(self, exc: BaseException) -> None:
        if self.on_error is not None:
            try:
                self.on_error(exc)
            except Exception:  # a broken callback must not stop delivery
                log.exception("outbox on_error callback failed")

    def _take_batch(self) -> None:
        while len(self._inflight) < self.max_batch and self._queue:
            slot = self._queue.popleft()
            if not slot[LIVE]:
                continue
            if slot is self._hb:
                self._hb = None  # in flight now: a newer heartbeat must not touch it
            if type(slot[EVENT]) is not TurnsEvent:
                self._urgent -= 1
            self._inflight.append(slot)
        self._kicked = False

    def _acknowledge(self) -> None:
        for slot in self._inflight:
            seq = getattr(slot[EVENT], "seq", None)
            if seq is not None and (self.last_acked_seq is None or seq > self.last_acked_seq):
                self.last_acked_seq = seq
        self.sent_events += len(self._inflight)
        self._last_ok = time.monotonic()
        self._live -= len(self._inflight)
        self._inflight = []
        covers = [s[COVER] for s in (self._live_head(), self._hb) if s is not None]
        self._acked_ticket = (min(covers) if covers else self._last_ticket + 1) - 1
        if self.journal is not None:
            self.journal.delivered(self._acked_ticket)
        for target, fut in list(self._waiters):
            if target <= self._acked_ticket and not fut.done():
                fut.set_result(True)

    def _live_head(self) -> Queued | Slot | None:
        while self._queue and not self._queue[0][LIVE]:
            self._queue.popleft()
        return self._queue[0] if self._queue else None

    def _stop(self) -> None:
        self._stopped = True
        for _, fut in self._waiters:
            if not fut.done():
                fut.set_result(False)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:  # a bug, not a send failure: say so loudly, and release flushers
            log.error("outbox sender task died; %d events undelivered", self._live, exc_info=exc)
            self._report(exc)
        self._closed = True
        self._stop()
