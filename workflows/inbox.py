"""Exactly-once, in-order delivery of the agent's events into the workflow.

Signals may arrive twice (the agent's outbox retries) and out of order (several
senders, retries racing). Sequenced events are applied in ``seq`` order, early ones
held until the gap fills; each ``event_id`` is applied once. A sequenced event whose id
was already applied still *consumes its seq* (as a no-op): a new agent that replays a
turn after a crash re-sends ids the workflow has seen under fresh seq numbers, and
those numbers must not leave a gap. Pure and deterministic; its whole state is carried
across continue-as-new.

Nothing waits forever and nothing grows without bound: held events are bounded in total
encoded bytes (past that an event is held as a small *tombstone* that keeps its place and
is applied as a refusal), and a gap that stays open for ``GAP_WAIT_S`` is skipped and the
skip recorded, so one event lost upstream cannot stall the events behind it. A seq more
than ``MAX_AHEAD`` past the next one is refused outright: a skip can never jump there. Event ids are
remembered in a bounded window, long ones by a digest, so the carried window stays small.
"""

from __future__ import annotations

import hashlib
from collections import deque

from ringflow.contract.events import InboxEvent, Tombstone
from ringflow.contract.wire import MAX_BATCH, encoded_bytes

SEEN_WINDOW = 4096
MAX_HELD = 500
MAX_HELD_BYTES = 256 * 1024  # all held events together, encoded
GAP_WAIT_S = 30.0  # a missing seq is skipped once later events have waited this long
# How far past the next seq an event may be. An agent sends one batch (at most MAX_BATCH
# events) at a time, each once the one before it was taken, and a refused event keeps its
# seq: its events reach the workflow at most a batch past the first one missing. A seq
# further on is no agent's (a hostile 10**9 once made the gap skip jump there, and every
# later event of the real agent was refused as already applied): it is refused, not held.
MAX_AHEAD = 2 * MAX_BATCH


def _key(event_id: str) -> str:
    """How an id is remembered: itself when short (every id the agent makes), a digest
    when long, so 4096 remembered ids stay well under the continue-as-new budgets."""
    if len(event_id) <= 48:
        return event_id
    return "#" + hashlib.sha256(event_id.encode()).hexdigest()[:40]


def _event_id(event: InboxEvent) -> str | None:
    return getattr(event, "event_id", None)  # a heartbeat has none


def _seq(event: InboxEvent) -> int | None:
    return getattr(event, "seq", None)  # hangups, heartbeats and some line events have none


class Inbox:
    def __init__(
        self,
        next_seq: int = 1,
        seen: list[str] | None = None,
        held: list[InboxEvent] | None = None,
        held_since: float | None = None,
    ) -> None:
        self.next_seq = next_seq
        self._seen_order: deque[str] = deque((_key(e) for e in seen or []), maxlen=SEEN_WINDOW)
        self._seen = set(self._seen_order)
        self._held: dict[int, InboxEvent] = {}
        for event in held or []:  # every held event has its seq
            if (seq := _seq(event)) is not None:
                self._held[seq] = event
        self._held_bytes = sum(encoded_bytes(h) for h in self._held.values())
        # when the current gap opened (the oldest wait for ``next_seq``), for skipping it
        self.held_since = held_since if self._held else None
        self.duplicates = 0

    def _mark(self, event_id: str | None) -> bool:
        """Record ``event_id``; False if it was already applied (a duplicate)."""
        if event_id is None:
            return True
        event_id = _key(event_id)
        if event_id in self._seen:
            self.duplicates += 1
            return False
        if len(self._seen_order) == self._seen_order.maxlen:
            self._seen.discard(self._seen_order[0])
        self._seen_order.append(event_id)
        self._seen.add(event_id)
        return True

    def accept(self, event: InboxEvent, now: float = 0.0) -> tuple[list[InboxEvent], str | None]:
        """Events ready to apply now, in order, and a reason if this one was refused.
        ``now`` (the workflow's clock) dates a gap that opens, for :meth:`skip_gap`."""
        event_id = _event_id(event)
        seq = _seq(event)
        if seq is None:
            return ([event] if self._mark(event_id) else []), None
        if seq < self.next_seq:
            if event_id is not None and _key(event_id) in self._seen:
                self.duplicates += 1  # the outbox retrying a batch that did arrive
                return [], None
            return [], f"seq {seq} was already applied (next is {self.next_seq})"
        if seq > self.next_seq + MAX_AHEAD:
            return [], (
                f"seq {seq} is more than {MAX_AHEAD} past the next ({self.next_seq}), "
                "further than the call's agent could have sent: refused"
            )
        if seq > self.next_seq:
            held = self._held.get(seq)
            if held is not None:
                if _event_id(held) == event_id:
                    self.duplicates += 1
                    return [], None
                return [], f"seq {seq} is already held with another event id"
            if len(self._held) >= MAX_HELD:
                return [], f"too many events held waiting for seq {self.next_seq}"
            size = encoded_bytes(event)
            if self._held_bytes + size > MAX_HELD_BYTES:
                event = Tombstone(
                    event_id=event_id,
                    seq=seq,
                    reason=f"dropped: {size} bytes while waiting for seq {self.next_seq}, "
                    f"over the {MAX_HELD_BYTES} bytes held events may take",
                )
                size = encoded_bytes(event)
                if self._held_bytes + size > MAX_HELD_BYTES:
                    return [], f"too many bytes held waiting for seq {self.next_seq}"
            if not self._held:
                self.held_since = now
            self._held[seq] = event
            self._held_bytes += size
            return [], None
        return self._drain(event, now), None

    def _drain(self, first: InboxEvent, now: float) -> list[InboxEvent]:
        ready: list[InboxEvent] = []
        nxt: InboxEvent | None = first
        while nxt is not None:
            if self._mark(_event_id(nxt)):
                ready.append(nxt)
            self.next_seq += 1
            nxt = self._held.pop(self.next_seq, None)
            if nxt is not None:
                self._held_bytes -= encoded_bytes(nxt)
        # the next gap (if any) starts now: its events waited for the one just filled
        self.held_since = now if self._held else None
        if not self._held:
            self._held_bytes = 0
        return ready

    def skip_gap(
        self, now: float, wait_s: float = GAP_WAIT_S, why: str | None = None
    ) -> tuple[list[InboxEvent], str | None]:
        """Once events have waited ``wait_s`` for a seq that has not come, give up on the
        missing ones: the held events are applied, and the reason says which were skipped
        (and ``why``, when it is not the wait)."""
        if not self._held or self.held_since is None or now - self.held_since < wait_s:
            return [], None
        first = min(self._held)
        skipped = (
            f"seq {self.next_seq}" if first == self.next_seq + 1 else f"seq {self.next_seq} to {first - 1}"
        )
        reason = f"{skipped} {why or f'never arrived within {wait_s:g} s'}: skipped"
        event = self._held.pop(first)
        self._held_bytes -= encoded_bytes(event)
        self.next_seq = first
        return self._drain(event, now), reason

    def seen(self, event_id: str) -> bool:
        return _key(event_id) in self._seen

    @property
    def waiting_for(self) -> int | None:
        return self.next_seq if self._held else None

    @property
    def held_bytes(self) -> int:
        return self._held_bytes

    def handed_on(self) -> tuple[int, list[str], list[InboxEvent]]:
        return self.next_seq, list(self._seen_order), [self._held[k] for k in sorted(self._held)]
