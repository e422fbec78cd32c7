"""How one event is delivered by the outbox (``agents/outbox.py``): the slot it waits in,
the retry backoff between sends, the errors that stop delivery, and the journal it is
written through first."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Protocol

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


class Slot:
    """One queued event. ``ticket`` is its put order; ``cover`` is the oldest ticket whose
    delivery it stands for (lower than ``ticket`` only for a heartbeat that superseded older
    ones, which sets it after construction), which is what ``flush`` waits on."""

    __slots__ = ("cover", "event", "live", "put_at", "ticket")

    def __init__(self, ticket: int, event: AgentEvent, put_at: float) -> None:
        self.ticket = self.cover = ticket
        self.event = event
        self.put_at = put_at
        self.live = True
