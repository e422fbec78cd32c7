"""Exactly-once, in-order delivery of the agent's events into the workflow.

Signals may arrive twice (the agent's outbox retries) and out of order (several
senders, retries racing). Each ``event_id`` is applied once, sequenced events in
``seq`` order, early ones held until the gap fills. Pure and deterministic, and its
whole state is carried across continue-as-new.
"""

from __future__ import annotations

from collections import deque
from typing import Any

SEEN_WINDOW = 4096
MAX_HELD = 1000


class Inbox:
    def __init__(self, next_seq: int = 1, seen: list[str] | None = None,
                 held: list[dict[str, Any]] | None = None) -> None:
        self.next_seq = next_seq
        self._seen_order: deque[str] = deque(seen or [], maxlen=SEEN_WINDOW)
        self._seen = set(self._seen_order)
        self._held: dict[int, dict[str, Any]] = {int(h["seq"]): h for h in held or []}
        self.duplicates = 0

    def _mark(self, event_id: str) -> None:
        if len(self._seen_order) == self._seen_order.maxlen:
            self._seen.discard(self._seen_order[0])
        self._seen_order.append(event_id)
        self._seen.add(event_id)

    def accept(self, event: dict[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
        """Events ready to apply now, in order, and a reason if this one was refused."""
        event_id = event.get("event_id")
        if event_id is not None:
            if event_id in self._seen or any(h.get("event_id") == event_id for h in self._held.values()):
                self.duplicates += 1
                return [], None  # a duplicate is not an error: it is the outbox doing its job
        seq = event.get("seq")
        if seq is None:
            if event_id is not None:
                self._mark(event_id)
            return [event], None
        if seq < self.next_seq:
            if event_id is not None:
                self._mark(event_id)
            return [], f"seq {seq} was already applied (next is {self.next_seq})"
        if seq > self.next_seq:
            if seq in self._held:
                return [], f"seq {seq} is already held with another event id"
            if len(self._held) >= MAX_HELD:
                return [], f"too many events held waiting for seq {self.next_seq}"
            self._held[seq] = event
            return [], None
        ready = [event]
        if event_id is not None:
            self._mark(event_id)
        self.next_seq += 1
        while self.next_seq in self._held:
            nxt = self._held.pop(self.next_seq)
            if nxt.get("event_id") is not None:
                self._mark(nxt["event_id"])
            ready.append(nxt)
            self.next_seq += 1
        return ready, None

    def seen(self, event_id: str) -> bool:
        return event_id in self._seen

    @property
    def waiting_for(self) -> int | None:
        return self.next_seq if self._held else None

    def carry(self) -> tuple[int, list[str], list[dict[str, Any]]]:
        return self.next_seq, list(self._seen_order), [self._held[k] for k in sorted(self._held)]
