"""The call engine against the flow-format spec, one behaviour per test.

Each test drives the pure engine with events and asserts on the effects and the next
state; where the spec says the state must not change, equality with the input is checked.
"""

from __future__ import annotations

from typing import Any

import pytest

from ringflow.callflow.conditions import holds
from ringflow.callflow.effects import EndCall, Extract, Rejected, RunFunction, Say, SetNode, ToolResponse
from ringflow.callflow.engine import Engine
from ringflow.callflow.events import (
    CallStarted,
    ExtractionResult,
    FunctionCalled,
    HangUp,
    MaxDuration,
    UserIdle,
    UserSpoke,
)
from ringflow.callflow.loader import parse_text
from ringflow.callflow.model import Condition
from ringflow.callflow.state import CallState
from tests.support.engine_flows import (
    HANDLERS,
    Call,
    action,
    agent,
    build,
    clinic,
    end,
    engine,
    flow,
    gated,
    go,
    http,
    kinds,
    only,
    table,
)


def dana(eng: Engine | None = None) -> Call:
    return Call(eng or clinic(), first_name="Dana")


# --- composing what the LLM sees -------------------------------------------------------------
def test_prompt_is_role_then_task_rendered_with_builtins() -> None:
    set_node = only(dana().effects, SetNode)
    assert set_node.prompt == (
        "You are Ava for Northside.\n\nGreet Dana (2023-11-14 22:13, call c1, from +15550100, order unknown)."
    )
    assert set_node.greeting == "Hello Dana!"


def test_add_role_false_leaves_the_role_out_and_context_is_per_node() -> None:
    call = dana()
    assert only(call.effects, SetNode).context == "append"
    set_node = only(call.call("to_book"), SetNode)
    assert set_node.prompt == "Book it."
    assert set_node.context == "reset"


def test_tools_are_node_functions_then_globals_strict_and_templated() -> None:
    tools = only(dana().effects, SetNode).tools
    assert [t.name for t in tools] == ["to_book", "note", "lookup", "check", "find", "human", "complain"]
    assert tools[0].description == "Book for Dana."
    note = tools[1]
    assert note.strict and note.parameters["required"] == ["text", "size"]
    assert note.parameters["properties"]["size"]["type"] == ["integer", "null"]
    assert note.parameters["additionalProperties"] is False
    assert tools[2].description == "Look a record up." and "query" in tools[2].parameters["properties"]


def test_globals_are_not_offered_on_end_nodes() -> None:
    call = dana()
    call.call("human")
    assert [t.name for t in only(call.effects, SetNode).tools] == ["rate"]


# --- the LLM calling functions ---------------------------------------------------------------
def test_unknown_function_is_an_error_naming_the_valid_ones_and_changes_nothing() -> None:
    call = dana()
    before = call.state
    response = only(call.call("book_now"), ToolResponse)
    assert response.error and response.result["status"] == "error"
    assert response.result["valid_functions"] == [
        "to_book",
        "note",
        "lookup",
        "check",
        "find",
        "human",
        "complain",
    ]
    assert "to_book" in response.result["error"]
    # nothing moves; the refusal is counted (the call's record keeps it, a canary compares it)
    assert call.state == before.model_copy(update={"refused": 1}) and len(call.effects) == 1


@pytest.mark.parametrize("args", [{"text": 3}, {"size": 2}, {"text": "x", "size": "big"}])
def test_arguments_violating_the_schema_are_an_error_for_the_llm(args: dict[str, Any]) -> None:
    call = dana()
    before = call.state
    response = only(call.call("note", **args), ToolResponse)
    assert response.error and response.result["error"].startswith("invalid argument")
    assert call.state == before.model_copy(update={"refused": 1})


def test_transition_only_moves_with_speech_then_extracts_the_old_node() -> None:
    call = dana()
    effects = call.call("to_book")
    assert kinds(effects) == ["tool_response", "say", "extract", "set_node", "llm_turn"]
    assert effects[0] == ToolResponse(name="to_book", result={"status": "ok"}, run_llm=False)
    assert effects[1] == Say(text="One moment, Dana.", allow_interrupt=False)
    assert effects[2].node == "greet" and [f.name for f in effects[2].fields] == ["mood", "age"]
    assert (call.state.node, call.state.path, call.state.transitions) == ("book", ["greet", "book"], 1)


def test_capture_stores_the_arguments_in_state_and_stays() -> None:
    call = dana()
    effects = call.call("note", text="window seat", size=None)  # a strict LLM sends null for optionals
    captured = {"status": "ok", "captured": {"text": "window seat"}}
    assert effects == [ToolResponse(name="note", result=captured)]
    assert call.state.state == {"note": {"text": "window seat"}} and call.state.node == "greet"


def test_handler_and_http_entries_ask_for_a_run_and_wait() -> None:
    call = dana()
    run = only(call.call("check"), RunFunction)
    assert (run.kind, run.name, run.node, run.timeout_s, run.cancel_on_interruption) == (
        "handler",
        "check",
        "greet",
        4,
        True,
    )
    run = only(call.call("find", q="slots"), RunFunction)
    assert run.kind == "http" and run.http is not None and not run.action
    assert run.http.url == "https://api.test/slots" and run.http.body == run.args == {"q": "slots"}
    assert sorted(call.state.pending) == ["1", "2"] and call.state.node == "greet"


@pytest.mark.parametrize(
    ("key", "value", "target"),
    [
        ("true", True, "hit"),
        ("true", "True", "hit"),
        ("True", "true", "hit"),
        ("1", 1, "hit"),
        ("1", "1", "hit"),
        ("1", 1.0, "hit"),
        ("'1'", 1, "hit"),
        ("available", "available", "hit"),
        ("true", 1, "other"),
        ("true", False, "other"),
        ("1", "one", "other"),
    ],
)
def test_results_route_through_a_branch_table_by_canonical_string(key: str, value: Any, target: str) -> None:
    cases = parse_text(f"{{field: status, cases: {{{key}: hit}}, default: other}}")  # as YAML reads it
    call = Call(engine(flow({"ask": agent(http("find", transition_to=cases)), "hit": end(), "other": end()})))
    call.call("find", q="x")
    effects = call.result({"status": value})
    assert effects[0] == ToolResponse(name="find", result={"status": value}, run_llm=False)
    assert call.state.path == ["ask", target] and call.state.pending == {}


def test_a_handler_result_follows_a_plain_transition() -> None:
    nodes = {"a": agent({"name": "check", "transition_to": "b"}), "b": end()}
    call = Call(engine(flow(nodes, handlers=HANDLERS)))
    call({"type": "function_called", "name": "check"})  # events may arrive as dicts
    assert call.result({"ok": True})[0] == ToolResponse(name="check", result={"ok": True}, run_llm=False)
    assert call.state.path == ["a", "b"] and call.state.end_reason == "completed"


def result_flow(cases: dict[str, str] | None = None) -> Engine:
    cases = {"yes": "bye"} if cases is None else cases
    return engine(flow({"ask": agent(http("find", transition_to=table(cases))), "bye": end()}))


def test_an_unmatched_result_without_default_stays_and_lets_the_llm_speak() -> None:
    call = Call(result_flow())
    call.call("find", q="x")
    assert call.result({"status": "no"}) == [ToolResponse(name="find", result={"status": "no"})]
    assert call.state.node == "ask" and call.state.pending == {}


@pytest.mark.parametrize("result", ["yes", ["yes"], {"other": "yes"}, None])
def test_a_result_that_cannot_be_branched_on_is_an_error_for_the_llm(result: Any) -> None:
    call = Call(result_flow())
    call.call("find", q="x")
    response = only(call.result(result), ToolResponse)
    assert response.error and "'status' field" in response.result["error"]
    assert call.state.node == "ask" and call.state.pending == {}


def test_no_response_keeps_the_bot_silent_and_a_bad_second_value_is_an_error() -> None:
    call = Call(result_flow())
    call.call("find", q="x")
    assert call.result({"status": "no"}, response="no_response") == [
        ToolResponse(name="find", result={"status": "no"}, run_llm=False)
    ]
    call.call("find", q="x")
    response = only(call.result({"status": "yes"}, response="node_b"), ToolResponse)
    assert response.error and "TRANSITION_IN_YAML" in response.result["error"]
    assert call.state.node == "ask"


def test_a_handler_error_is_reported_and_the_call_stays_with_its_state() -> None:
    call = Call(result_flow())
    call.call("find", q="x")
    effects = call.result(None, error="boom", state={"tries": 1})
    assert effects == [ToolResponse(name="find", error=True, result={"status": "error", "error": "boom"})]
    assert call.state.node == "ask" and call.state.state == {"tries": 1}


def test_duplicate_and_stale_results_are_rejected_and_change_nothing() -> None:
    call = Call(result_flow())
    call.call("find", q="x")
    call.result({"status": "no"})
    before = call.state
    for run_id in (1, 99):
        assert kinds(call.result({"status": "yes"}, run_id=run_id)) == ["rejected"]
        assert call.state == before


def test_a_result_for_a_node_already_left_is_recorded_silently() -> None:
    call = dana()
    call.call("lookup", query="x")
    call.call("to_book")
    assert call.result({"status": "found"}) == [
        ToolResponse(name="lookup", result={"status": "found"}, run_llm=False)
    ]
    assert call.state.node == "book"


# --- gates and actions -----------------------------------------------------------------------
VALUES = CallState(
    variables={"n": 5, "tier": "gold", "tags": ["a", "b"], "name": "Dana", "huge": 10**400},
    extracted={"age": 30},
    state={"order": {"total": 120, "items": {"x": 1}}},
).values()
T, F = {"var": "n", "op": "==", "value": 5}, {"var": "n", "op": "<", "value": 5}


@pytest.mark.parametrize(
    ("cond", "expected"),
    [
        (T, True),
        ({"var": "n", "op": "==", "value": "5"}, True),
        ({"var": "n", "op": "!=", "value": 5}, False),
        (F, False),
        ({"var": "n", "op": "<=", "value": 5}, True),
        ({"var": "n", "op": ">", "value": 4.5}, True),
        ({"var": "n", "op": ">=", "value": 6}, False),
        ({"var": "tier", "op": "in", "value": ["vip", "gold"]}, True),
        ({"var": "tier", "op": "not_in", "value": ["gold"]}, False),
        ({"var": "tags", "op": "contains", "value": "b"}, True),
        ({"var": "name", "op": "contains", "value": "an"}, True),
        ({"var": "age", "op": ">", "value": 18}, True),
        ({"var": "state.order.items", "op": "contains", "value": "x"}, True),
        ({"var": "state.order.total", "op": ">=", "value": 100}, True),
        ({"var": "state.order", "op": "exists"}, True),
        ({"var": "state.order.none", "op": "exists"}, False),
        ({"var": "state.x.y", "op": "not_exists"}, True),
        ({"var": "tier", "op": "<", "value": 3}, False),
        ({"var": "huge", "op": ">", "value": 1}, True),
        ({"all": [T, F]}, False),
        ({"any": [F, T]}, True),
        ({"all": [T, {"any": [F, {"var": "tags", "op": "contains", "value": "a"}]}]}, True),
    ],
)
def test_gate_conditions(cond: dict[str, Any], expected: bool) -> None:
    assert holds(Condition.model_validate(cond), VALUES) is expected


def test_gates_evaluate_on_entry_without_an_llm_turn() -> None:
    call = Call(gated())
    effects = call.call("order", total=150)
    assert kinds(effects) == ["tool_response", "set_node", "llm_turn", "end_call"]
    assert call.state.path == ["ask", "route", "big"] and call.state.transitions == 2
    assert effects[-1] == EndCall(reason="completed", disposition="big")


def test_a_chain_of_gates_reaches_an_action_that_routes_on_its_result() -> None:
    call = Call(gated(), vip=True)
    run = only(call.call("order", total=5), RunFunction)
    assert run.action and (run.name, run.node, run.kind) == ("check", "fetch", "handler")
    assert call.state.path == ["ask", "route", "check", "fetch"] and call.state.node == "fetch"
    assert kinds(call.result({"status": "found", "id": 7})) == ["set_node", "llm_turn", "end_call"]
    assert call.state.state["rec"] == {"status": "found", "id": 7} and call.state.disposition == "big"


@pytest.mark.parametrize(
    ("route", "outcome", "target"),
    [
        (table({"found": "ok", "error": "sorry"}), {"error": "timeout"}, "sorry"),  # a failure is a result
        (table({"found": "ok"}, "other"), {"error": "timeout"}, "other"),
        (table({"found": "ok"}, "other", field="code"), {"result": {"status": "found"}}, "other"),
        ("ok", {"error": "timeout"}, "ok"),  # the call goes on
        (table({"found": "ok"}), {"result": {"status": "odd"}}, "fetch"),
    ],
)  # nowhere to go: the call ends
def test_an_action_routes_failures_like_results_and_ends_when_stuck(
    route: Any, outcome: dict[str, Any], target: str
) -> None:
    nodes = {
        "fetch": action({"name": "check"}, route, save_as="rec"),
        "ok": end(),
        "sorry": end(),
        "other": end(),
    }
    call = Call(engine(flow(nodes, handlers=HANDLERS)))
    call.result(**{"result": None, **outcome})
    assert call.state.path[-1] == target and call.state.ended
    assert call.state.end_reason == ("error" if target == "fetch" else "completed")
    if "error" in outcome:
        assert call.state.state["rec"] == {"status": "error", "error": "timeout"}


# --- entering nodes --------------------------------------------------------------------------
def test_the_greeting_is_said_on_entry_but_not_on_re_entry_from_itself() -> None:
    call = dana()
    assert kinds(call.effects) == ["set_node", "say"]
    assert call.effects[1] == Say(text="Hello Dana!", allow_interrupt=True)
    call = Call(
        engine(
            flow(
                {
                    "a": agent(go("again", "a"), go("go", "b")),
                    "b": agent(go("again", "b"), go("back", "a"), greeting="Hi.", allow_interrupt=False),
                    "z": end(),
                },
                global_functions=[go("bye", "z")],
            )
        )
    )
    assert kinds(call.call("go")) == ["tool_response", "set_node", "say"]
    assert call.effects[-1] == Say(text="Hi.", allow_interrupt=False)
    assert kinds(call.call("again")) == ["tool_response", "set_node", "llm_turn"]
    assert kinds(call.call("back"))[-1] == "llm_turn" and kinds(call.call("go"))[-1] == "say"
    assert call.state.path == ["a", "b", "b", "a", "b"]


def test_respond_immediately_false_waits_for_the_caller() -> None:
    call = Call(engine(flow({"a": agent(go("go", "b"), respond_immediately=False), "b": end()})))
    assert kinds(call.effects) == ["set_node"]


def test_an_end_node_gets_its_turn_then_ends_the_call() -> None:
    call = dana()
    effects = call.call("human")
    assert kinds(effects) == ["tool_response", "extract", "set_node", "llm_turn", "extract", "end_call"]
    assert call.effects[-1] == EndCall(reason="completed", disposition="booked")
    call2 = Call(engine(flow({"a": agent(go("go", "b")), "b": end(greeting="Bye!")})))
    assert kinds(call2.call("go"))[-3:] == ["set_node", "say", "end_call"]
    assert call2.state.disposition == "completed"


def test_pre_and_post_actions_run_around_the_first_turn() -> None:
    call = Call(
        engine(
            flow(
                {
                    "a": agent(
                        go("go", "b"),
                        greeting="Hi.",
                        pre_actions=[{"tts_say": "Hello {{who}}."}, {"function": "log_entry"}],
                        post_actions=[{"tts_say": "Ready."}],
                    ),
                    "b": end(),
                },
                handlers=HANDLERS,
                variables={"who": {"default": "you"}},
            )
        )
    )
    assert kinds(call.effects) == ["set_node", "say", "run_function", "say", "say"]
    assert [e.text for e in call.effects if isinstance(e, Say)] == ["Hello you.", "Hi.", "Ready."]
    assert call.result(None, state={"logged": True}) == []  # a side effect: no LLM, no move
    assert call.state.state == {"logged": True} and call.state.node == "a"


def test_an_end_conversation_action_ends_the_call() -> None:
    call = Call(
        engine(
            flow(
                {"a": agent(go("go", "a"), post_actions=[{"end_conversation": "Bye."}, {"tts_say": "never"}])}
            )
        )
    )
    assert kinds(call.effects) == ["set_node", "llm_turn", "say", "end_call"]
    assert call.state.end_reason == "completed" and call.effects[2].text == "Bye."


def test_the_last_node_is_extracted_when_the_call_ends() -> None:
    call = dana()
    effects = call(HangUp())
    assert kinds(effects) == ["extract", "end_call"] and effects[0].node == "greet"
    assert call.state.disposition == "user_hangup"
    call = dana()
    assert [e.node for e in call.call("human") if isinstance(e, Extract)] == ["greet", "bye"]


# --- limits, idle and the end of a call -----------------------------------------------------
def looping(**settings: Any) -> Call:
    return Call(
        engine(
            flow(
                {
                    "a": agent(go("to_b", "b"), go("stay", "a"), go("out", "z")),
                    "b": agent(go("to_a", "a")),
                    "z": end(),
                },
                settings=settings,
            )
        )
    )


def test_more_transitions_than_allowed_end_the_call() -> None:
    call = looping(max_transitions=2)
    call.call("to_b"), call.call("to_a")
    effects = call.call("to_b")
    assert effects[-1] == EndCall(reason="max_transitions", disposition="max_transitions")
    assert call.state.ended and call.state.path == ["a", "b", "a"]


def test_entering_a_node_too_often_is_a_loop() -> None:
    call = looping(max_node_visits=2)
    call.call("stay")
    assert call.call("stay")[-1] == EndCall(reason="loop_detected", disposition="loop_detected")


def test_max_duration_and_hangup_end_once() -> None:
    call = looping()
    assert call(MaxDuration())[-1] == EndCall(reason="max_duration", disposition="max_duration")
    ended = call.state
    assert kinds(call(HangUp(reason="agent_lost"))) == ["rejected"] and call.state == ended
    assert only(call.call("stay"), ToolResponse).error and call.state == ended


def test_idle_escalates_to_a_goodbye_and_speaking_or_moving_resets_it() -> None:
    call = Call(
        engine(
            flow(
                {"a": agent(go("again", "a"), go("go", "b")), "b": end()},
                settings={"idle": {"prompts": 2, "goodbye": "Bye {{who | friend}}."}},
            )
        )
    )
    assert [e.reason for e in call(UserIdle()) + call(UserIdle())] == ["idle", "idle"]
    call(UserSpoke())
    assert call.state.idle_count == 0
    call(UserIdle()), call(UserIdle())
    call.call("again")
    assert call.state.idle_count == 0
    call(UserIdle()), call(UserIdle())
    effects = call(UserIdle())
    assert kinds(effects) == ["say", "end_call"] and call.state.end_reason == "user_idle"
    assert effects[0].text == "Bye friend."


# --- starting, events and extraction ---------------------------------------------------------
@pytest.mark.parametrize("variables", [{}, {"first_name": 7}])
def test_a_missing_or_ill_typed_required_variable_rejects_the_start(variables: dict[str, Any]) -> None:
    step = clinic().start(CallStarted(variables=variables))
    assert kinds(step.effects) == ["rejected"] and "first_name" in step.effects[0].reason
    assert step.state == CallState()


@pytest.mark.parametrize(
    "event",
    [
        {},
        {"type": "nope"},
        {"type": "function_called"},
        {"type": "function_result", "run_id": "x"},
        {"type": "hangup", "reason": "bored"},
        {"type": "user_idle", "at": "NaN"},
        {"type": "user_spoke", "zz": 1},
        [1, 2],
        None,
        "hangup",
    ],
)
def test_malformed_events_are_rejected_and_change_nothing(event: Any) -> None:
    call = dana()
    before = call.state
    effects = call(event)
    assert kinds(effects) == ["rejected"] and effects[0].reason.startswith("malformed event")
    assert call.state == before


def test_events_out_of_place_are_rejected() -> None:
    eng = clinic()
    assert kinds(eng.apply(CallState(), FunctionCalled(name="to_book")).effects) == ["rejected"]
    call = dana(eng)
    assert kinds(call(FunctionCalled(name="to_book", node="book"))) == ["rejected"]
    assert kinds(call(CallStarted())) == ["rejected"]
    foreign = call.state.model_copy(update={"node": "elsewhere"})
    assert "does not have" in only(eng.apply(foreign, UserIdle()).effects, Rejected).reason


def test_extraction_results_merge_and_ill_typed_values_are_dropped() -> None:
    call = dana()
    effects = call(ExtractionResult(node="greet", values={"mood": "happy", "age": "old", "x": 1}))
    assert call.state.extracted == {"mood": "happy"}
    assert "['age', 'x']" in only(effects, Rejected).reason
    call(ExtractionResult(node="greet", values={"mood": "angry", "age": 41.0}))
    assert call.state.extracted == {"mood": "happy", "age": 41.0}
    before = call.state
    assert kinds(call(ExtractionResult(node="zz", values={}))) == ["rejected"] and call.state == before


def test_an_extracted_disposition_beats_the_end_nodes() -> None:
    eng = engine(
        flow(
            {
                "a": agent(go("go", "b"), extract=[{"name": "disposition"}]),
                "b": end(disposition="plain", extract=[{"name": "disposition"}]),
            }
        )
    )
    call = Call(eng)
    call(ExtractionResult(node="a", values={"disposition": "warm_lead"}))
    assert call.call("go")[-1] == EndCall(reason="completed", disposition="warm_lead")
    call(ExtractionResult(node="b", values={"disposition": "hot_lead"}))
    assert call.state.disposition == "hot_lead"


def test_an_absurd_clock_leaves_time_builtins_to_their_fallbacks() -> None:
    eng = engine(flow({"a": agent(go("go", "b"), task="At {{current_time | some time}}."), "b": end()}))
    assert only(Call(eng, at=1e20).effects, SetNode).prompt == "At some time."


def test_snapshot_rebuilds_the_current_node() -> None:
    call = dana()
    assert call.eng.snapshot(call.state) == only(call.effects, SetNode)
    assert Engine(build(flow({"a": agent(go("go", "b")), "b": end()}))).snapshot(CallState()) is None
