"""The call's state, pure: the progress model, the transcript, the function calls and the
agent's liveness, and the carry they go through at continue-as-new (in the JSON earlier
releases wrote, so a run continues across a deploy either way)."""

from __future__ import annotations

from ringflow.callflow.state import CallState
from ringflow.contract.call import Continuation
from ringflow.contract.events import Tombstone, Turn, TurnsEvent
from ringflow.contract.updates import CallFunctionResult
from ringflow.workflows.budgets import SLICE_MAX_BYTES
from ringflow.workflows.call_progress import CallProgress, FunctionCalls, Liveness, Transcript

# A carry as the release before this one wrote it: held events were plain dicts.
OLD_CARRY = {
    "state": {"call_id": "c1", "node": "verify", "path": ["verify"], "state": {"tags": ["vip"]}},
    "status": "live",
    "next_seq": 3,
    "held": [
        {
            "type": "turns",
            "event_id": "e5",
            "seq": 5,
            "items": [{"role": "user", "text": "hi", "interrupted": False}],
            "at": None,
        },
        {"type": "refused", "event_id": None, "seq": 6, "reason": "dropped: too large"},
    ],
    "seen_ids": ["e1", "e2"],
    "transcript_tail": [{"role": "user", "text": "hello"}, {"role": "assistant", "text": "hi there"}],
    "transcript_count": 12,
    "rejected": [{"event_id": "x", "reason": "malformed", "at": 1.0}],
    "agent_id": "agent-1",
    "runs": 2,
    "started_at": 100.0,
    "fn_results": {
        "f1": {"result": {"ok": True}, "decision": "stay", "node": "verify", "effects": [], "state": None}
    },
    "fn_done": ["f0"],
}


def test_an_old_carry_decodes_into_the_call_state() -> None:
    carry = Continuation.model_validate(OLD_CARRY)
    assert isinstance(carry.held[0], TurnsEvent) and isinstance(carry.held[1], Tombstone)
    progress = CallProgress.continued(carry, now=500.0)
    assert progress.runs == 3 and progress.started_at == 100.0 and progress.status == "live"
    assert progress.flow_state.node == "verify" and progress.handler_state == {"tags": ["vip"]}
    transcript = Transcript.continued(carry)
    assert transcript.base == 10 and transcript.count == 12
    calls = FunctionCalls.continued(carry)
    assert calls.known("f1") and calls.known("f0") and not calls.known("f2")
    # what the next run writes reads back the same
    again = Continuation.model_validate_json(carry.model_dump_json())
    assert again == carry


def test_a_new_call_starts_from_a_run_zero() -> None:
    carry = Continuation(state=CallState(call_id="c1"), status="dialing", next_seq=1, runs=0, started_at=7.0)
    progress = CallProgress.continued(carry, now=9.0)
    assert progress.runs == 1 and progress.started_at == 7.0 and progress.rejected == []
    assert Transcript.continued(carry).count == 0


def test_the_transcript_pages_from_absolute_indexes() -> None:
    transcript = Transcript([Turn(role="user", text=str(i)) for i in range(3)], count=103)
    transcript.add(Turn(role="assistant", text="x" * 100))
    transcript.add(Turn(role="system", text="[keys 1]"), weigh=False)
    assert transcript.count == 105 and transcript.base == 100
    assert transcript.bytes == sum(len(t.text) + 160 for t in transcript.turns[:4])
    window = transcript.window(0)  # before base: from the oldest held
    assert window["start"] == 100 and window["total"] == 105 and len(window["turns"]) == 5
    assert transcript.window(104)["turns"] == [transcript.turns[4].model_dump(mode="json")]
    big = Transcript([Turn(role="user", text="y" * 16_000) for _ in range(60)])
    assert 0 < len(big.window(0)["turns"]) <= SLICE_MAX_BYTES // 16_000 + 1
    assert len(big.tail()) < 60  # the tail is bounded in bytes too


def test_function_calls_remember_a_bounded_window() -> None:
    calls = FunctionCalls()
    for i in range(205):
        calls.remember(f"f{i}", CallFunctionResult(result=i))
    assert len(calls.results) == 200 and not calls.known("f0") and calls.known("f204")
    calls.ask_cancel("f204")  # answered already: nothing to cancel
    calls.ask_cancel("later")
    assert calls.cancel_requested == {"later"}
    kept, done = calls.for_next_run()  # what the next run may be asked again: the same window
    assert set(kept) == set(calls.results) and "f0" not in kept and done == []


def test_liveness() -> None:
    live = Liveness(15.0, now=100.0)
    assert live.due == 115.0 and not live.overdue(114.9) and live.overdue(115.0)
    live.seen(120.0)
    assert live.due == 135.0
    live.overdue_now(130.0)
    assert live.overdue(130.0)
