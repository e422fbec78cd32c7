"""Properties of the engine over random valid flows and random event sequences.

The workflow and the agent replay the same events through the engine and carry its
state through JSON (Temporal payloads, continue-as-new), so the engine must be a pure,
total function: same input, same output; input untouched; JSON-stable state; no crash.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringflow.callflow.compiled import compile_flow
from ringflow.callflow.effects import EFFECTS_ADAPTER, Rejected
from ringflow.callflow.engine import Engine, Step
from ringflow.callflow.events import CallStarted, FunctionCalled, FunctionResult
from ringflow.callflow.model import BranchTable, FlowDefinition
from ringflow.callflow.state import CallState
from tests.support import engine_flows as ef

PROPERTY = settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
START = CallStarted(call_id="p1", caller_number="+15550100", at=ef.T0)


def checked_apply(eng: Engine, state: CallState, event: Any) -> Step:
    """Apply one event, asserting what must hold of every single step."""
    before, event_before = state.model_dump(), copy.deepcopy(event)
    step = eng.apply(state, event)
    assert state.model_dump() == before, "the engine mutated its input state"
    assert event == event_before, "the engine mutated its input event"
    internal = [e.reason for e in step.effects if isinstance(e, Rejected) and "internal error" in e.reason]
    assert not internal, internal
    return step


def random_call(data: st.DataObject, definition: FlowDefinition) -> tuple[list[Any], list[Step]]:
    """A call driven by drawn events; each is drawn knowing the state it will meet."""
    eng = Engine(definition)
    steps = [eng.start(START)]
    events: list[Any] = []
    for i in range(data.draw(st.integers(1, 20), label="length")):
        event = ef.events(data, definition, steps[-1].state, ef.T0 + i)
        events.append(event)
        steps.append(checked_apply(eng, steps[-1].state, event))
    return events, steps


@PROPERTY
@given(ef.flows(), st.data())
def test_the_engine_is_deterministic_and_leaves_its_inputs_alone(flow: ef.Data, data: st.DataObject) -> None:
    definition = ef.build(flow)
    events, steps = random_call(data, definition)
    again = Engine(compile_flow(definition))  # a fresh compilation: no state hides in the cache
    replay = [again.start(START)]
    for event in copy.deepcopy(events):
        replay.append(checked_apply(again, replay[-1].state, event))
    assert replay == steps


@PROPERTY
@given(ef.flows(), st.data())
def test_states_and_effects_survive_json_and_the_call_goes_on_identically(
    flow: ef.Data, data: st.DataObject
) -> None:
    definition = ef.build(flow)
    events, steps = random_call(data, definition)
    eng = Engine(definition)
    for i, step in enumerate(steps):
        restored = CallState.model_validate_json(step.state.model_dump_json())
        assert restored == step.state
        assert EFFECTS_ADAPTER.validate_json(EFFECTS_ADAPTER.dump_json(step.effects)) == step.effects
        if i < len(events):
            assert eng.apply(restored, events[i]) == steps[i + 1]


def moves(data: st.DataObject, eng: Engine, state: CallState) -> list[Any]:
    """Events that make the call leave its node: a transition call (and its result)."""
    assert state.node is not None
    cnode = eng.flow.nodes[state.node]
    if cnode.node.type == "action":
        (run_id,) = (run.run_id for run in state.pending.values() if run.purpose == "action_node")
        return [FunctionResult(run_id=run_id, result={"status": _case(data, cnode.node.transition_to)})]
    exits = [fn for fn in cnode.functions.values() if fn.entry.transition_to is not None]
    fn = data.draw(st.sampled_from(exits), label="exit")
    args = {"v": 1} if fn.kind == "capture" else {"query": "x"} if fn.kind == "handler" else {"q": "x"}
    if fn.kind in ("transition_only", "capture"):
        return [FunctionCalled(name=fn.entry.name, args={} if fn.kind == "transition_only" else args)]
    status = _case(data, fn.entry.transition_to)
    return [
        FunctionCalled(name=fn.entry.name, args=args),
        FunctionResult(run_id=state.seq + 1, result={"status": status}),
    ]


def _case(data: st.DataObject, t: Any) -> str:
    """A result value that makes a branch table move (a case, or anything with a default)."""
    if not isinstance(t, BranchTable):
        return "any"
    options = [*t.cases, *(["unmatched"] if t.default is not None else [])]
    return data.draw(st.sampled_from(options), label="case")


@PROPERTY
@given(ef.flows(), st.data())
def test_transition_calls_alone_end_a_call_by_max_transitions_plus_one(
    flow: ef.Data, data: st.DataObject
) -> None:
    definition = ef.build(flow)
    eng = Engine(definition)
    limit = definition.flow.settings.max_transitions
    state = eng.start(START).state
    made = 0
    while not state.ended:
        assert made <= limit, f"still live after {made} transitions (max_transitions={limit})"
        before = state
        for event in moves(data, eng, state):
            state = checked_apply(eng, state, event).state
        assert state.ended or state.transitions > before.transitions, "a transition call did not move"
        made += 1
    assert state.transitions <= limit + 1
    assert state.end_reason in ("completed", "max_transitions", "loop_detected")
