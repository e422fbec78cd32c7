"""The canary's arithmetic: a stable split, and a sequential test that rolls a worse
candidate back, promotes one that is no worse, and waits while it cannot tell."""

from __future__ import annotations

import random

from ringflow.callflow.canary import CanaryPolicy, SideStats, decide, side_for


def test_the_split_is_stable_and_near_the_share() -> None:
    keys = [f"call-{i}" for i in range(20_000)]
    sides = [side_for("clinic.production.abc", k, 10) for k in keys]
    assert sides == [side_for("clinic.production.abc", k, 10) for k in keys]  # the same, every time
    share = sides.count("candidate") / len(sides)
    assert 0.09 < share < 0.11
    # another canary splits the same calls otherwise, and the edges hold
    other = [side_for("clinic.production.def", k, 10) for k in keys]
    assert other != sides
    assert {side_for("c", k, 100) for k in keys[:500]} == {"candidate"}
    assert {side_for("c", k, 0.0) for k in keys[:500]} == {"baseline"}


def simulated(n: int, fail_rate: float, seed: int, length: float = 60.0) -> SideStats:
    """``n`` ended calls, each failing with ``fail_rate``; the rest complete."""
    rng = random.Random(seed)
    s = SideStats()
    for _ in range(n):
        if rng.random() < fail_rate:
            s = s.add("error", None, rng.uniform(5, 20))
        else:
            s = s.add("completed", "booked", rng.gauss(length, 10))
    return s


def test_a_worse_candidate_is_rolled_back_and_the_reason_names_the_metric() -> None:
    v = decide(simulated(300, 0.25, 1), simulated(3000, 0.02, 2), CanaryPolicy())
    assert v.decision == "rollback"
    assert "failed_rate" in v.reason and "completed_rate" in v.reason
    failed = next(c for c in v.checks if c.metric == "failed_rate")
    assert failed.verdict == "worse" and failed.low > 0


def test_a_candidate_no_worse_is_promoted_once_enough_calls_ended() -> None:
    policy = CanaryPolicy(min_calls=200)
    v = decide(simulated(1500, 0.02, 3), simulated(1500, 0.02, 4), policy)
    assert v.decision == "promote", v.reason
    assert all(c.verdict == "no_worse" for c in v.checks)
    few = decide(simulated(100, 0.02, 3), simulated(1500, 0.02, 4), policy)
    assert few.decision == "continue" and "200 each needed" in few.reason


def test_it_waits_while_it_cannot_tell() -> None:
    v = decide(simulated(40, 0.05, 5), simulated(40, 0.02, 6), CanaryPolicy(min_calls=20))
    assert v.decision == "continue" and "not yet sure" in v.reason
    empty = decide(SideStats(), SideStats(), CanaryPolicy())
    assert empty.decision == "continue"


def test_longer_calls_count_as_worse() -> None:
    v = decide(simulated(800, 0.0, 7, length=120.0), simulated(800, 0.0, 8, length=60.0), CanaryPolicy())
    assert v.decision == "rollback" and "call_length_s" in v.reason


def test_repeated_looks_at_equal_sides_do_not_roll_back() -> None:
    """The sequence is valid at every look: peeking after each call of two equal sides (seeded)
    never rolls the candidate back."""
    rng = random.Random(9)
    cand, base = SideStats(), SideStats()
    policy = CanaryPolicy(min_calls=10_000)
    for _ in range(1500):
        for label in ("c", "b"):
            failed = rng.random() < 0.1
            s = (cand if label == "c" else base).add(
                "error" if failed else "completed", None if failed else "ok", rng.gauss(60, 10)
            )
            if label == "c":
                cand = s
            else:
                base = s
        assert decide(cand, base, policy).decision == "continue"


def test_a_candidate_whose_calls_refuse_functions_is_rolled_back_for_it() -> None:
    """Outcomes alike (every call completes), but the candidate's flow refuses the LLM's
    function calls on a third of its calls: worse on refusals alone, and the reason says so."""
    rng = random.Random(7)
    cand, base = SideStats(), SideStats()
    for _ in range(300):
        cand = cand.add("completed", "booked", rng.gauss(60, 10), refused=2 if rng.random() < 0.33 else 0)
    for _ in range(3000):
        base = base.add("completed", "booked", rng.gauss(60, 10), refused=1 if rng.random() < 0.01 else 0)
    assert 80 < cand.refused < 120 and cand.refusals == 2 * cand.refused
    v = decide(cand, base, CanaryPolicy())
    assert v.decision == "rollback", v.reason
    assert "refused_rate (calls with a function call refused)" in v.reason
    assert f"{cand.refusals} vs {base.refusals} function calls refused" in v.reason
    assert [c.metric for c in v.checks if c.verdict == "worse"] == ["refused_rate"]
