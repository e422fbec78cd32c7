"""The agent's engine and the workflow's hold equal state after every step (issue 23 §1),
over generated flows and event sequences: see ``tests/agreement.py`` for the model.
``RINGFLOW_AGREEMENT_EXAMPLES`` raises the examples (``bench/agreement.py`` runs 10,000)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
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
