"""The agent's engine and the workflow's hold equal state after every step (issue 23 §1),
over generated flows and event sequences: see ``tests/agreement.py`` for the model.
``RINGFLOW_AGREEMENT_EXAMPLES`` raises the examples (``bench/agreement.py`` runs 10,000)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.support import agreement
from tests.support import engine_flows as ef

EXAMPLES = int(os.environ.get("RINGFLOW_AGREEMENT_EXAMPLES", "150"))
AGREEMENT = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


@AGREEMENT
@given(ef.flows(), st.data())
def test_agent_and_workflow_hold_equal_state_after_every_step(flow: ef.Data, data: st.DataObject) -> None:
    agreement.play(data, flow)


@AGREEMENT
@given(agreement.digressing_flows(), st.data())
def test_both_sides_agree_on_digressions_and_the_return_stack(flow: ef.Data, data: st.DataObject) -> None:
    """Global nodes entered, returned from, refused (used up, cooling down, already open) and
    left their own way, with kills and continue-as-new between: the return stack, the uses
    and the cooldown marks are equal on both sides after every step."""
    s = agreement.play(data, flow, max_steps=40)
    returned = sum(
        1 for a, b in zip(s.wf.path, s.wf.path[1:], strict=False) if a in ("hours", "robot") and b != a
    )
    event(f"digressions: {min(sum(s.wf.global_uses.values()), 2)}, left: {min(returned, 2)}")


@AGREEMENT
@given(agreement.subflow_flows(), st.data())
def test_both_sides_agree_on_entering_and_leaving_subflows(flow: ef.Data, data: st.DataObject) -> None:
    """Subflows entered (waiting for an input's value, or not), returned from at either end
    node, abandoned by a calling flow's global function, ended inside by a hangup or a limit,
    with extractions of both scopes answering early and late, kills and continue-as-new
    between: the frames, and whose values are whose, are equal on both sides after every step."""
    s = agreement.play(data, flow, max_steps=40)
    inside = any(n.startswith("sub.") for n in s.wf.path)
    returned = any(
        a.startswith("sub.") and not b.startswith("sub.")
        for a, b in zip(s.wf.path, s.wf.path[1:], strict=False)
    )
    event(f"entered: {inside}, left: {returned}, open at the end: {bool(s.wf.subflows)}")


def test_a_workflow_that_applied_results_itself_is_caught() -> None:
    """The check is not vacuous: the workflow applying an extraction's result the moment it
    has it (as before issue 23) makes the two sides differ, and the message says where."""
    flow = ef.flow(
        {
            "ask": ef.agent(ef.go("next", "chat"), extract=[{"name": "tier", "type": "string"}]),
            "chat": ef.agent(ef.go("done", "bye")),
            "bye": ef.end(),
        },
        variables={},
    )
    definition = ef.build(flow)
    s = agreement.Sides(
        agreement.Engine(definition), *[agreement.Engine(definition).start(agreement.START).state] * 2
    )
    s.agent_apply(agreement.FunctionCalled(name="next", node="ask", at=ef.T0 + 1))
    s.caught_up()
    s.wf_apply(agreement.ExtractionResult(node="ask", id="ask#1", values={"tier": "gold"}))
    message = agreement.divergence(1, ["agent next", "workflow applied"], s.agent, s.expected())
    assert s.agent != s.expected()
    assert "extracted: agent {} / workflow {'tier': 'gold'}" in message
    assert "extracting: agent ['ask#1'] / workflow []" in message


def test_a_digression_open_across_a_kill_and_continue_as_new_returns_on_both_sides() -> None:
    """The agent digresses and reports it, dies, the workflow continues as new with the frame
    on its return stack, the next agent (attached from the workflow's state) goes back: both
    sides end on the origin with an empty stack, the digression in the path."""
    flow = ef.flow(
        {
            "ask": ef.agent(ef.go("next", "bye"), greeting="Hello."),
            "hours": ef.agent(
                task="Hours.", **{"global": {"description": "Hours?", "return": True, "max_uses": 1}}
            ),
            "bye": ef.end(),
        },
        start="ask",
    )
    eng = agreement.Engine(ef.build(flow))
    first = eng.start(agreement.START).state
    s = agreement.Sides(eng, first, first)
    s.agent_apply(agreement.FunctionCalled(name="hours", node="ask", at=s.now()))
    s.caught_up()
    s.queue, s.agent = [], s.wf  # killed after its signal was sent
    agreement.continue_as_new(s)
    s.agent = s.wf  # the next agent attaches
    assert s.agent.return_stack[-1].origin == "ask"
    s.agent_apply(agreement.FunctionCalled(name="go_back", node="hours", at=s.now()))
    s.caught_up()
    assert s.agent == s.wf
    assert s.wf.node == "ask" and s.wf.return_stack == [] and s.wf.path == ["ask", "hours", "ask"]


def test_a_subflow_open_across_a_kill_and_continue_as_new_returns_on_both_sides() -> None:
    """The agent enters a subflow and reports it, dies, the workflow continues as new with the
    frame (the caller's values) in its state, the next agent (attached from the workflow's
    state) finishes the subflow: both sides are back on the calling flow's node with its own
    values, the subflow's result under ``state.sub`` and its nodes in the path."""
    flow = ef.flow(
        {
            "ask": ef.agent(ef.go("next", "sub"), greeting="Hello."),
            "sub": {
                "type": "subflow",
                "use": "subflows/check.yaml",
                "inputs": {"who": "Kim"},
                "transition_to": "after",
            },
            "after": ef.agent(ef.go("finish", "bye")),
            "bye": ef.end(),
        },
        variables={"vip": {"type": "boolean", "default": True}},
    )
    eng = agreement.Engine(ef.build(flow))
    first = eng.start(agreement.START).state
    s = agreement.Sides(eng, first, first)
    s.agent_apply(agreement.FunctionCalled(name="next", node="ask", at=s.now()))
    s.caught_up()
    s.queue, s.agent = [], s.wf  # killed after its signal was sent
    agreement.continue_as_new(s)
    s.agent = s.wf  # the next agent attaches
    assert s.agent.subflows[0].variables == {"vip": True} and s.agent.variables == {
        "who": "Kim",
        "tier": "basic",
    }
    s.agent_apply(agreement.FunctionCalled(name="answer", args={"v": 1}, node="sub.ask", at=s.now()))
    s.caught_up()
    assert s.agent == s.wf
    assert s.wf.node == "after" and s.wf.subflows == [] and s.wf.variables == {"vip": True}
    assert s.wf.state == {"sub": {"end": "yes", "state": {"answer": {"v": 1}}}}
    assert s.wf.path == ["ask", "sub", "sub.ask", "sub.yes", "after"]
