"""The inbox's bounds, pure: held events bounded in bytes, gaps skipped after a wait,
long event ids remembered by digest, refused events keeping their seq."""

from __future__ import annotations

from typing import Any

from ringflow.contract.events import Tombstone, TurnsEvent
from ringflow.workflows.epochs import stale
from ringflow.workflows.inbox import MAX_AHEAD, MAX_HELD_BYTES, Inbox
from ringflow.workflows.intake import Refusal, intake, tombstone


def turns_dict(seq: int, text: str = "hi", event_id: str | None = None) -> dict[str, Any]:
    return {
        "type": "turns",
        "event_id": event_id or f"e{seq}",
        "seq": seq,
        "items": [{"role": "user", "text": text}],
    }


def turns(seq: int, text: str = "hi", event_id: str | None = None) -> TurnsEvent:
    return TurnsEvent.model_validate(turns_dict(seq, text, event_id))


def test_held_events_past_the_byte_budget_wait_as_refusals_and_keep_their_place() -> None:
    inbox = Inbox()
    big = "y" * 200_000
    for seq in (2, 3, 4):
        assert inbox.accept(turns(seq, big), now=10.0) == ([], None)
    assert inbox.held_bytes <= MAX_HELD_BYTES
    ready, refused = inbox.accept(turns(1), now=11.0)
    assert refused is None
    assert [e.seq for e in ready] == [1, 2, 3, 4]  # type: ignore[union-attr]
    assert [e.type for e in ready] == ["turns", "turns", "refused", "refused"]
    assert isinstance(ready[2], Tombstone) and "over the 262144 bytes held events may take" in ready[2].reason
    assert inbox.next_seq == 5 and inbox.waiting_for is None and inbox.held_bytes == 0


def test_a_gap_is_skipped_only_after_the_wait() -> None:
    inbox = Inbox()
    inbox.accept(turns(3), now=100.0)
    inbox.accept(turns(4), now=105.0)
    assert inbox.skip_gap(129.9, 30.0) == ([], None)
    ready, reason = inbox.skip_gap(130.0, 30.0)
    assert [e.seq for e in ready] == [3, 4]  # type: ignore[union-attr]
    assert reason == "seq 1 to 2 never arrived within 30 s: skipped"
    assert inbox.next_seq == 5
    ready, refused = inbox.accept(turns(2), now=131.0)  # the lost one, too late
    assert ready == [] and refused == "seq 2 was already applied (next is 5)"


def test_long_event_ids_are_remembered_by_digest_across_a_carry() -> None:
    long_id = "x" * 120
    inbox = Inbox()
    assert len(inbox.accept(turns(1, event_id=long_id))[0]) == 1
    next_seq, seen, held = inbox.handed_on()
    assert all(len(s) <= 48 for s in seen)
    again = Inbox(next_seq, seen, held)
    assert again.accept(turns(5, event_id=long_id)) == ([], None)  # held: a new seq
    assert again.seen(long_id)


def test_a_refused_event_with_a_seq_becomes_a_tombstone_in_order() -> None:
    items = intake(
        "events",
        [0],
        lambda _: {
            "events": [
                {"type": "turns", "event_id": "bad", "seq": 1, "items": [{"role": "robot"}]},
                turns_dict(2),
            ]
        },
    )
    assert isinstance(items[0], Refusal) and items[0].seq == 1 and "items.0.role" in items[0].reason
    inbox = Inbox()
    assert isinstance(items[1], TurnsEvent) and inbox.accept(items[1])[0] == []
    ready, _ = inbox.accept(tombstone(items[0], 1))
    assert [e.type for e in ready] == ["refused", "turns"]


def test_intake_refuses_what_it_cannot_read() -> None:
    def boom(_: Any) -> Any:
        raise ValueError("unknown encoding")

    assert intake("turns", [], lambda p: p)[0].reason == "signal 'turns' needs exactly one payload, got 0"  # type: ignore[union-attr]
    assert "unreadable payload" in intake("turns", [b""], boom)[0].reason  # type: ignore[union-attr]
    assert intake("nope", [1], lambda p: p)[0].reason == "unknown signal 'nope'"  # type: ignore[union-attr]
    got = intake(
        "turns",
        [0],
        lambda _: {
            "event_id": "t",
            "seq": 1,
            "items": [{"role": "user", "text": "x", "started_at": float("nan")}],
        },
    )
    assert isinstance(got[0], Refusal) and "started_at" in got[0].reason and got[0].seq == 1


def test_a_seq_past_the_reach_of_any_agent_is_refused_and_never_skipped_to() -> None:
    """One hostile seq 10**9 was held, the gap skip jumped there, and every later event of
    the real agent was refused as already applied."""
    inbox = Inbox()
    ready, refused = inbox.accept(turns(10**9), now=1.0)
    assert ready == [] and refused is not None and f"more than {MAX_AHEAD} past the next (1)" in refused
    assert inbox.waiting_for is None and inbox.skip_gap(1_000.0, 30.0) == ([], None)
    assert inbox.accept(turns(1 + MAX_AHEAD), now=2.0) == ([], None)  # as far as an agent can be: held
    assert inbox.accept(turns(2 + MAX_AHEAD), now=2.0)[1] is not None
    assert [e.seq for e in inbox.accept(turns(1), now=3.0)[0]] == [1]  # type: ignore[union-attr]
    assert inbox.next_seq == 2 and inbox.waiting_for == 2


def test_a_malformed_event_keeps_the_epoch_it_named() -> None:
    """So a replaced agent's malformed event is refused for its epoch, not ordered."""
    (refusal,) = intake("events", [{"events": [{"type": "turns", "seq": 4, "epoch": 3}]}], lambda p: p)
    assert isinstance(refusal, Refusal) and (refusal.seq, refusal.epoch) == (4, 3)
    assert tombstone(refusal, 4).epoch == 3
    (bad,) = intake("events", [{"events": [{"type": "turns", "seq": 4, "epoch": "3"}]}], lambda p: p)
    assert isinstance(bad, Refusal) and bad.epoch is None


def test_what_an_epoch_says() -> None:
    assert stale(2, None, "x") is None and stale(2, 2, "x") is None
    assert stale(2, 1, "a turns event") == (
        "a turns event from agent epoch 1 refused: the call's agent is epoch 2 (replaced)"
    )
    assert stale(2, 5, "x") == "x names agent epoch 5, never issued (the call is at 2): refused"
