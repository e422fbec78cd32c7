"""The job group's reducer (callflow/jobs.py): whatever order the jobs finish, fail, time
out or are cancelled in, each job ends once, the group ends once, and its end state is a
function of the first final word about each job."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.callflow.jobs import (
    CancelGroup,
    GroupEvent,
    GroupState,
    GroupTimedOut,
    JobFinished,
    JobProgress,
    advance,
    new_group,
    outcome_of,
)
from tests.support.paths import ROOT

NAMES = ["a", "b", "c", "d"]


def group(n: int, cancel_on_error: bool = False) -> GroupState:
    return new_group("g-1", "node", "fn", NAMES[:n], cancel_on_error)[0]


def play(g: GroupState, events: list[GroupEvent]) -> tuple[GroupState, list[dict[str, Any]]]:
    out: list[dict[str, Any]] = []
    for ev in events:
        g, envs = advance(g, ev)
        out += envs
    return g, out


finals = st.sampled_from(["completed", "failed", "timed_out"])


@st.composite
def scenario(draw: Any) -> tuple[int, bool, list[GroupEvent]]:
    n = draw(st.integers(1, 4))
    coe = draw(st.booleans())
    events: list[GroupEvent] = []
    for name in NAMES[:n]:
        events.append(JobFinished(job=name, status=draw(finals), result={"job": name}, error=None))
        if draw(st.booleans()):  # a late or duplicate result for the same job
            events.append(JobFinished(job=name, status=draw(finals), result={"late": True}))
        if draw(st.booleans()):
            events.append(JobProgress(job=name, data={"pct": 50}))
    if draw(st.booleans()):
        events.append(CancelGroup(reason="llm"))
    if draw(st.booleans()):
        events.append(GroupTimedOut())
    return n, coe, draw(st.permutations(events))


@settings(max_examples=400, deadline=None)
@given(scenario())
def test_every_order_ends_each_job_and_the_group_once(case: tuple[int, bool, list[GroupEvent]]) -> None:
    n, coe, events = case
    g, envs = play(group(n, coe), events)
    assert g.done  # every job had a final word
    assert all(j.status != "running" for j in g.jobs.values())
    assert [e["type"] for e in envs].count("group_completed") == 1
    assert envs[-1]["type"] == "group_completed"
    assert g.outcome == outcome_of(g.jobs, g.cancelled)
    done = [e["job"] for e in envs if e["type"] == "job_completed"]
    assert sorted(done) == sorted(set(done))  # no job ends twice
    # nothing after the group's end changes it: replaying the same events gives the same group
    again, envs2 = play(group(n, coe), events)
    assert again == g and envs2 == envs


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_final_statuses_do_not_depend_on_the_order_results_arrive_in(data: Any) -> None:
    """Without cancel_on_error, a group and its jobs end the same whichever job is heard
    from first (late duplicates after each job's first result included)."""
    n = data.draw(st.integers(1, 4))
    firsts = [JobFinished(job=x, status=data.draw(finals), result={"job": x}) for x in NAMES[:n]]
    late = [JobFinished(job=x, status="completed", result={"late": True}) for x in NAMES[:n]]
    order1 = data.draw(st.permutations(firsts)) + data.draw(st.permutations(late))
    order2 = data.draw(st.permutations(firsts)) + data.draw(st.permutations(late))
    g1, _ = play(group(n), order1)
    g2, _ = play(group(n), order2)
    assert g1.done and g2.done
    assert g1.jobs == g2.jobs and g1.outcome == g2.outcome


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_cancel_fixes_every_job_not_yet_finished(data: Any) -> None:
    """Cancelled wherever it falls among the results: the jobs heard from before it keep
    their status, every other job is cancelled, results after it are ignored."""
    n = data.draw(st.integers(1, 4))
    results = data.draw(st.permutations([JobFinished(job=x, status="completed") for x in NAMES[:n]]))
    k = data.draw(st.integers(0, n))
    g, _ = play(group(n), [*results[:k], CancelGroup(reason="hangup"), *results[k:]])
    assert g.done
    before = {e.job for e in results[:k]}
    for name, job in g.jobs.items():
        assert job.status == ("completed" if name in before else "cancelled")
    assert g.outcome == ("completed" if k == n else "cancelled")


def test_outcomes() -> None:
    g, envs = play(
        group(3), [JobFinished(job="a", status="completed"), JobFinished(job="b", status="failed")]
    )
    assert not g.done and [e["type"] for e in envs] == ["job_completed", "job_completed"]
    g, envs = advance(g, JobFinished(job="c", status="timed_out"))
    assert g.outcome == "partial" and envs[-1]["jobs"] == {"a": "completed", "b": "failed", "c": "timed_out"}
    g, _ = play(group(2), [JobFinished(job="a", status="failed"), GroupTimedOut()])
    assert g.outcome == "failed" and g.jobs["b"].status == "timed_out"
    g, _ = play(group(3, cancel_on_error=True), [JobFinished(job="b", status="failed")])
    assert g.done and g.outcome == "failed" and g.jobs["a"].status == "cancelled"
    g, envs = play(
        group(1), [JobProgress(job="a", data=1), JobFinished(job="a", status="completed", result=2)]
    )
    assert [e["type"] for e in envs] == ["job_update", "job_completed", "group_completed"]
    assert g.outcome == "completed" and g.jobs["a"].result == 2


def test_the_engine_starts_a_group_and_routes_on_its_outcome() -> None:

    from ringflow.callflow.engine import Engine
    from ringflow.callflow.events import CallStarted, FunctionCalled, JobsFinished
    from ringflow.callflow.loader import load_flow

    flow = load_flow(ROOT / "examples/flows/order_jobs/flow.yaml")
    engine = Engine(flow)
    state = engine.start(CallStarted(call_id="c1", at=1.0)).state
    step = engine.apply(state, FunctionCalled(name="check_order", node="greet", at=2.0))
    start, answer = step.effects
    assert start.type == "start_jobs" and [j.name for j in start.jobs] == [
        "check_inventory",
        "check_shipping",
        "check_payment",
    ]
    assert answer.result == {
        "group_id": start.group_id,
        "status": "started",
        "jobs": ["check_inventory", "check_shipping", "check_payment"],
        "label": "Checking your order",
    }
    done = {"group_id": start.group_id, "outcome": "partial", "jobs": {}}
    moved = engine.apply(
        step.state, JobsFinished(group_id=start.group_id, node="greet", name="check_order", result=done)
    )
    assert moved.state.node == "some_news" and moved.state.state["check_order"] == done
    cancelled = {**done, "outcome": "cancelled"}
    stays = engine.apply(
        step.state, JobsFinished(group_id="g", node="greet", name="check_order", result=cancelled)
    )
    assert stays.state.node == "greet" and stays.effects == []


def test_an_http_job_is_templated_like_an_http_entry() -> None:
    from ringflow.callflow.loader import validate_data

    def flow(url: str) -> dict[str, Any]:
        entry = {
            "name": "quote",
            "description": "Price it.",
            "parameters": {"type": "object", "properties": {"sku": {"type": "string"}}},
            "jobs": {"run": [{"name": "price", "http": {"url": url}}]},
            "transition_to": "b",
        }
        return {
            "flow": "f",
            "nodes": {"a": {"task": "x", "functions": [entry]}, "b": {"type": "end", "task": "y"}},
        }

    assert validate_data(flow("https://shop.example/price/{{sku}}")).ok
    report = validate_data(flow("https://shop.example/price/{{skew}}"))
    assert any(
        "nodes.a.functions[0].jobs.run[0].http.url" in str(e) and "skew" in str(e) for e in report.errors
    )
