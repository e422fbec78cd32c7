"""Global nodes (``global:``): digressions offered on every node, a return stack in the call
state, ``go_back`` to where the call was (an "as I was saying" turn, not the greeting) or to a
named node, ``max_uses`` and ``cooldown``, and ``flow validate``'s rules for them."""

from __future__ import annotations

from typing import Any

import pytest

from ringflow.callflow.effects import LLMTurn, Say, SetNode, ToolResponse
from ringflow.callflow.engine import Engine, Step
from ringflow.callflow.events import CallStarted, ExtractionResult, FunctionCalled
from ringflow.callflow.loader import validate_data
from ringflow.callflow.render import mermaid
from ringflow.callflow.state import CallState, Digression
from tests.support import engine_flows as ef

START = CallStarted(call_id="g1", at=ef.T0)


def counted(state: CallState) -> CallState:
    """``state`` after a refused function call: nothing moved, the refusal is counted."""
    return state.model_copy(update={"refused": state.refused + 1})


def digressing(**hours: Any) -> ef.Data:
    """Three conversation nodes, each offering ``hours`` (returns) and ``robot`` (returns to
    ``ask``); ``quiet`` opts out."""
    return ef.flow(
        {
            "ask": ef.agent(ef.go("next", "offer"), greeting="Hello! Shall we book?"),
            "offer": ef.agent(ef.go("next", "confirm"), greeting="I have Tuesday at ten."),
            "confirm": ef.agent(ef.go("next", "quiet"), greeting="Shall I confirm?"),
            "quiet": ef.agent(ef.go("done", "bye"), global_nodes=False),
            "hours": ef.agent(
                task="Give the opening hours: 8 to 6.",
                greeting="We're open eight to six.",
                **{"global": {"description": "The caller asks for opening hours.", "return": True, **hours}},
            ),
            "robot": ef.agent(
                task="Say you are an AI assistant.",
                **{
                    "global": {
                        "description": "The caller asks if this is a robot.",
                        "return": "ask",
                        "max_uses": 1,
                    }
                },
            ),
            "bye": ef.end(),
        },
        start="ask",
    )


def call(eng: Engine, state: CallState, name: str) -> Step:
    return eng.apply(state, FunctionCalled(name=name, node=state.node, at=ef.T0 + state.transitions + 1))


def tools(step: Step) -> list[str]:
    return [t.name for t in ef.only(step.effects, SetNode).tools]


def test_a_global_node_is_offered_everywhere_but_itself_and_where_a_node_opts_out() -> None:
    eng = ef.engine(digressing(max_uses=2))
    first = eng.start(START)
    assert tools(first) == ["next", "hours", "robot"]
    on_hours = call(eng, first.state, "hours")
    assert tools(on_hours) == ["go_back", "robot"]  # not itself: no recursion
    state = first.state
    for name in ("next", "next", "next"):
        step = call(eng, state, name)
        state = step.state
    assert state.node == "quiet" and tools(step) == ["done"]
    refused = call(eng, state, "hours")
    assert refused.state == counted(state)
    assert ef.only(refused.effects, ToolResponse).error


def test_entering_pushes_the_origin_and_go_back_resumes_there_without_the_greeting() -> None:
    eng = ef.engine(digressing(max_uses=2))
    state = call(eng, eng.start(START).state, "next").state  # on offer
    into = call(eng, state, "hours")
    assert into.state.node == "hours"
    assert into.state.return_stack == [Digression(node="hours", origin="offer")]
    assert [e.text for e in into.effects if isinstance(e, Say)] == ["We're open eight to six."]
    back = call(eng, into.state, "go_back")
    assert back.state.node == "offer" and back.state.return_stack == []
    assert back.state.path == ["ask", "offer", "hours", "offer"]  # the digression shows
    assert not any(isinstance(e, Say) for e in back.effects)  # no "I have Tuesday at ten." again
    turn = ef.only(back.effects, LLMTurn)
    assert turn.reason == "return" and "As I was saying" in (turn.instructions or "")
    assert ef.only(back.effects, ToolResponse).run_llm is False


def test_a_named_return_enters_that_node_as_usual() -> None:
    eng = ef.engine(digressing(max_uses=2))
    state = call(eng, call(eng, eng.start(START).state, "next").state, "next").state  # on confirm
    back = call(eng, call(eng, state, "robot").state, "go_back")
    assert back.state.node == "ask" and back.state.path[-2:] == ["robot", "ask"]
    assert [e.text for e in back.effects if isinstance(e, Say)] == ["Hello! Shall we book?"]


def test_leaving_a_global_node_its_own_way_drops_its_frame() -> None:
    data = digressing(max_uses=2)
    data["nodes"]["hours"]["functions"] = [ef.go("book_now", "confirm")]
    eng = ef.engine(data)
    into = call(eng, eng.start(START).state, "hours")
    out = call(eng, into.state, "book_now")
    assert out.state.node == "confirm" and out.state.return_stack == []
    assert "go_back" not in tools(out)


def test_nested_digressions_unwind_in_order() -> None:
    data = digressing(max_uses=2)
    data["nodes"]["robot"]["global"] = {"description": "Robot?", "return": True, "max_uses": 1}
    eng = ef.engine(data)
    state = call(eng, eng.start(START).state, "next").state  # offer
    state = call(eng, state, "hours").state
    state = call(eng, state, "robot").state
    assert [f.origin for f in state.return_stack] == ["offer", "hours"]
    state = call(eng, state, "go_back").state
    assert state.node == "hours" and state.return_stack == [Digression(node="hours", origin="offer")]
    state = call(eng, state, "go_back").state
    assert state.node == "offer" and state.return_stack == []


def test_max_uses_stops_offering_it() -> None:
    eng = ef.engine(digressing(max_uses=2))
    state = eng.start(START).state
    for _ in range(2):
        state = call(eng, call(eng, state, "hours").state, "go_back").state
    assert state.global_uses == {"hours": 2}
    assert "hours" not in [t.name for t in (eng.snapshot(state) or SetNode(node="", prompt="")).tools]
    refused = call(eng, state, "hours")
    assert refused.state == counted(state)
    assert "used 2 times" in ef.only(refused.effects, ToolResponse).result["error"]


def test_a_cooldown_counts_the_moves_since_the_return() -> None:
    eng = ef.engine(digressing(cooldown=2))
    state = call(eng, call(eng, eng.start(START).state, "hours").state, "go_back").state
    assert "cooling down" in ef.only(call(eng, state, "hours").effects, ToolResponse).result["error"]
    state = call(eng, state, "next").state  # one move
    assert "hours" not in [t.name for t in (eng.snapshot(state) or SetNode(node="", prompt="")).tools]
    state = call(eng, state, "next").state  # two
    assert call(eng, state, "hours").state.node == "hours"


def test_go_back_is_refused_with_no_digression_open() -> None:
    data = digressing(max_uses=2)
    data["nodes"]["ask"]["functions"].append(ef.go("opening_hours", "hours"))
    eng = ef.engine(data)
    state = call(eng, eng.start(START).state, "opening_hours").state  # entered as a plain node
    assert state.node == "hours" and state.return_stack == []
    refused = call(eng, state, "go_back")
    assert (
        refused.state == counted(state)
        and "no digression" in ef.only(refused.effects, ToolResponse).result["error"]
    )


def test_the_return_stack_survives_json_as_continue_as_new_carries_it() -> None:
    eng = ef.engine(digressing(max_uses=2))
    state = call(eng, call(eng, eng.start(START).state, "next").state, "hours").state
    carried = CallState.model_validate_json(state.model_dump_json())
    assert carried == state
    assert call(eng, carried, "go_back").state == call(eng, state, "go_back").state


def test_a_resumed_agent_shows_the_same_tools() -> None:
    eng = ef.engine(digressing(max_uses=1))
    state = call(eng, call(eng, eng.start(START).state, "hours").state, "go_back").state
    snap = eng.snapshot(state)
    assert snap is not None and [t.name for t in snap.tools] == ["next", "robot"]


# --- flow validate -------------------------------------------------------------------------
def errors(data: ef.Data) -> list[str]:
    return [f"{e.path}: {e.message}" for e in validate_data(data, source="t").errors]


def test_the_pinned_example_is_valid_and_shows_in_the_graph() -> None:
    report = validate_data(digressing(max_uses=2), source="t")
    assert report.ok, report.errors
    assert report.definition is not None
    assert '-.->|"global hours"| hours' in mermaid(report.definition.flow)


@pytest.mark.parametrize(
    ("change", "wanted"),
    [
        (
            {"hours": {"global": {"description": "Hours.", "return": "hours", "max_uses": 1}}},
            "nodes.hours.global.return: global node 'hours' cannot return into itself",
        ),
        (
            {"hours": {"global": {"description": "Hours.", "return": True}}},
            "nodes.hours.global: global node 'hours' is a loop without a bound",
        ),
        (
            {"hours": {"global": {"description": "Hours.", "return": "nowhere", "max_uses": 1}}},
            "nodes.hours.global.return: unknown node 'nowhere'",
        ),
        (
            {"hours": {"global": {"description": "Hours.", "max_uses": 1}, "global_nodes": False}},
            "nodes.hours: dead end: no end node can be reached from 'hours'",
        ),
        (
            {"bye": {"global": {"description": "Stop.", "return": True}}},
            "nodes.bye.global.return: 'bye' is an end node",
        ),
        (
            {"ask": {"global": {"description": "Start.", "return": True, "max_uses": 1}}},
            "nodes.ask.global.return: 'ask' is the start node",
        ),
        (
            {"offer": {"functions": [ef.go("hours", "confirm")]}},
            "nodes.offer.functions[0].name: duplicate function name 'hours': the global node 'hours'",
        ),
        (
            {"hours": {"functions": [ef.go("go_back", "ask")]}},
            "nodes.hours.functions[0].name: duplicate function name 'go_back': the return of this global",
        ),
    ],
)
def test_validation_names_the_node_and_the_rule(change: dict[str, Any], wanted: str) -> None:
    data = digressing(max_uses=2)
    for nid, keys in change.items():
        data["nodes"][nid] = {**data["nodes"][nid], **keys}
    found = errors(data)
    assert any(e.startswith(wanted) for e in found), found


def test_a_misspelt_global_key_gets_a_hint() -> None:
    data = digressing(max_uses=2)
    data["nodes"]["hours"]["global"] = {"description": "Hours.", "retrun": True, "max_uses": 1}
    found = errors(data)
    assert any("nodes.hours.global.retrun" in e and "did you mean 'return'" in e for e in found), found


def test_a_return_that_waits_for_an_extraction_still_resumes_without_the_greeting() -> None:
    """The origin's prompt reads a value its own extraction gives: leaving it for the
    digression started that extraction, so the return waits for it (the wait speech), and
    the result resumes the node as a return, not as a fresh entry."""
    data = digressing(max_uses=2)
    data["variables"] = {"tier": {"type": "string"}}
    data["nodes"]["offer"]["extract"] = [{"name": "tier", "type": "string"}]
    data["nodes"]["offer"]["task"] = "Offer a slot to a {{tier}} member."
    eng = ef.engine(data)
    state = call(eng, call(eng, eng.start(START).state, "next").state, "hours").state
    assert state.extracting == ["offer#1"]
    back = call(eng, state, "go_back")
    assert back.state.waiting is not None and back.state.waiting.resuming
    assert [e.text for e in back.effects if isinstance(e, Say)] == ["One moment."]
    done = eng.apply(back.state, ExtractionResult(node="offer", id="offer#1", values={"tier": "gold"}))
    assert done.state.node == "offer" and done.state.waiting is None
    assert "gold member" in ef.only(done.effects, SetNode).prompt
    assert not any(isinstance(e, Say) for e in done.effects)
    assert ef.only(done.effects, LLMTurn).reason == "return"
