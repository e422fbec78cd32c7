"""Exactly-once, in-order delivery of the agent's events into the workflow.

Signals may arrive twice (the agent's outbox retries) and out of order (several
senders, retries racing). Sequenced events are applied in ``seq`` order, early ones
held until the gap fills; each ``event_id`` is applied once. A sequenced event whose id
was already applied still *consumes its seq* (as a no-op): a new agent that replays a
turn after a crash re-sends ids the workflow has seen under fresh seq numbers, and
those numbers must not leave a gap. Pure and deterministic; its whole state is carried
across continue-as-new.
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

    def _mark(self, event_id: str | None) -> bool:
        """Record ``event_id``; False if it was already applied (a duplicate)."""
        if event_id is None:
            return True
        if event_id in self._seen:
            self.duplicates += 1
            return False
        if len(self._seen_order) == self._seen_order.maxlen:
            self._seen.discard(self._seen_order[0])
        self._seen_order.append(event_id)
        self._seen.add(event_id)
        return True

    def accept(self, event: dict[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
        """Events ready to apply now, in order, and a reason if this one was refused."""
        event_id = event.get("event_id")
        seq = event.get("seq")
        if seq is None:
            return ([event] if self._mark(event_id) else []), None
        if seq < self.next_seq:
            if event_id in self._seen:
                self.duplicates += 1  # the outbox retrying a batch that did arrive
                return [], None
            return [], f"seq {seq} was already applied (next is {self.next_seq})"
        if seq > self.next_seq:
            held = self._held.get(seq)
            if held is not None:
                if held.get("event_id") == event_id:
                    self.duplicates += 1
                    return [], None
                return [], f"seq {seq} is already held with another event id"
            if len(self._held) >= MAX_HELD:
                return [], f"too many events held waiting for seq {self.next_seq}"
            self._held[seq] = event
            return [], None
        ready: list[dict[str, Any]] = []
        nxt: dict[str, Any] | None = event
        while nxt is not None:
            if self._mark(nxt.get("event_id")):
                ready.append(nxt)
            self.next_seq += 1
            nxt = self._held.pop(self.next_seq, None)
        return ready, None

    def seen(self, event_id: str) -> bool:
        return event_id in self._seen

    @property
    def waiting_for(self) -> int | None:
        return self.next_seq if self._held else None

    def carry(self) -> tuple[int, list[str], list[dict[str, Any]]]:
        return self.next_seq, list(self._seen_order), [self._held[k] for k in sorted(self._held)]
