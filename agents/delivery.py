"""How one event is delivered by the outbox (``agents/outbox.py``): the slot it waits in,
the retry backoff between sends, the errors that stop delivery, and the journal it is
written through first."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from operator import itemgetter
from typing import Any, Final, Protocol

from ringflow.contract.events import AgentEvent

JITTER = 0.1  # a retry waits between 90% and 100% of its backoff


class OutboxFull(RuntimeError):
    """``put`` past ``max_events``: the workflow has been unreachable for too long."""


class OutboxClosed(RuntimeError):
    """``put`` after ``close``/``abandon``: nothing would ever send the event."""


class ReceiverGone(Exception):
    """Raised by a ``send`` whose receiver no longer exists (the call's workflow has
    completed): no retry can succeed, so the outbox stops and reports it through
    ``on_error`` instead of retrying until it is closed."""


def cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def backoff_delay(
    attempt: int, initial_s: float, max_s: float, rand: Callable[[], float] = random.random
) -> float:
    """The wait before retry number ``attempt`` (0-based): doubling from ``initial_s``,
    capped at ``max_s``, then shortened by up to ``JITTER`` so that many agents cut off by
    the same outage do not all retry in lockstep when it ends."""
    base = min(max_s, initial_s * 2.0 ** min(attempt, 60))
    return base * (1.0 - JITTER * rand())


class Journal(Protocol):
    """Where queued events are written before they linger (``agents/journal.py``)."""

    healthy: bool

    def record(self, ticket: int, event: AgentEvent) -> None: ...

    def delivered(self, ticket: int) -> None: ...

    def start(self) -> None: ...

    async def close(self, timeout: float = 2.0, drop: bool = False) -> None: ...

    def abandon(self) -> None: ...


# Where a queued event waits: ``(ticket, event, put_at, live, cover)``, read by index.
# ``ticket`` is its put order; ``cover`` is the oldest ticket whose delivery it stands for
# (lower than ``ticket`` only for a heartbeat that superseded older ones), which is what
# ``flush`` waits on; ``live`` is False for a heartbeat a newer one superseded.
TICKET: Final = 0
EVENT: Final = 1
PUT_AT: Final = 2
LIVE: Final = 3
COVER: Final = 4

# Every event but a heartbeat waits in a plain tuple: one object made in C, nothing else
# built per ``put`` (the transition hot path's). Only a heartbeat's slot changes while it
# waits (superseded, or its event replaced by a newer one), so it is a :class:`Slot`.
Queued = tuple[int, AgentEvent, float, bool, int]


def _field(i: int) -> Any:
    def put(slot: list[Any], value: Any) -> None:
        slot[i] = value

    return property(itemgetter(i), put)


class Slot(list[Any]):
    """A heartbeat's place in the queue, laid out as :data:`Queued` but mutable, with its
    fields named. Slots are told apart by identity only (a list compares by value)."""

    __slots__ = ()

    ticket: int = _field(TICKET)
    event: AgentEvent = _field(EVENT)
    put_at: float = _field(PUT_AT)
    live: bool = _field(LIVE)
    cover: int = _field(COVER)
