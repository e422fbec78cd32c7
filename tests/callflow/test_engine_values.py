"""The engine waits where something reads a value an extraction still running will give
(issue 23 §1): which entries wait, what fills the wait, how a result resumes it, the
fallback when the extraction fails, and what validation says about a certain wait."""

from __future__ import annotations

from typing import Any

from ringflow.callflow.effects import EndCall, Extract, Say, SetNode, ToolResponse
from ringflow.callflow.events import DtmfEntered, ExtractionResult, UserIdle
from ringflow.callflow.loader import validate_data
from tests.support import engine_flows as ef

TIER = [{"name": "tier", "enum": ["gold", "basic"]}]
NOTED = "Noted: you are on the gold plan."


def plans(**check: Any) -> ef.Data:
    """ask (extracts tier) -> route (a gate on tier) -> gold/basic ends; or via chat -> noted."""
    return ef.flow(
        {
            "ask": ef.agent(ef.go("check", "route", **check), ef.go("chat_first", "chat"), extract=TIER),
            "chat": ef.agent(ef.go("go_on", "noted")),
            "noted": ef.agent(
                ef.go("wrap_up", "route"), greeting="Noted: you are on the {{tier | UNKNOWN}} plan."
            ),
            "route": ef.gate([({"var": "tier", "op": "==", "value": "gold"}, "gold_end")], "basic_end"),
            "gold_end": ef.end(greeting="Thank you, gold member.", disposition="gold"),
            "basic_end": ef.end(greeting="Thanks for calling.", disposition="basic"),
        },
        settings={"wait_speech": "Hold on."},
    )


def says(effects: list[Any]) -> list[str]:
    return [e.text for e in effects if isinstance(e, Say)]


def test_a_gate_right_after_the_extraction_waits_and_routes_on_its_result() -> None:
    c = ef.Call(ef.engine(plans()))
    effects = c.call("check")
    (x,) = [e for e in effects if isinstance(e, Extract)]
    assert x.id == "ask#1" and c.state.extracting == ["ask#1"]
    assert c.state.node == "route" and c.state.waiting is not None and not c.state.ended
    assert says(effects) == ["Hold on."]  # the wait is filled, never silence
    assert not any(isinstance(e, SetNode) for e in effects)
    assert c.eng.arrival(c.state) == [] and c.eng.snapshot(c.state) is None
    effects = c(ExtractionResult(node="ask", id="ask#1", values={"tier": "gold"}, at=ef.T0 + 5))
    assert c.state.path == ["ask", "route", "gold_end"] and c.state.disposition == "gold"
    assert says(effects) == ["Thank you, gold member."] and c.state.extracting == []
    assert c.state.waiting is None and any(isinstance(e, EndCall) for e in effects)


def test_the_transitions_speech_fills_the_wait_and_no_filler_is_added() -> None:
    c = ef.Call(ef.engine(plans(speech="Let me check.")))
    assert says(c.call("check")) == ["Let me check."]


def test_a_speech_reading_the_value_is_said_once_it_is_known() -> None:
    c = ef.Call(ef.engine(plans(speech="Checking your {{tier | UNKNOWN}} plan.")))
    assert says(c.call("check")) == ["Hold on."]
    effects = c(ExtractionResult(node="ask", id="ask#1", values={"tier": "basic"}))
    assert says(effects) == ["Checking your basic plan.", "Thanks for calling."]


def test_a_failed_extraction_resumes_with_the_fallback_on_both_sides() -> None:
    c = ef.Call(ef.engine(plans()))
    c.call("check")
    c(ExtractionResult(node="ask", id="ask#1", error="the extraction did not finish in time"))
    assert c.state.path[-1] == "basic_end" and c.state.extracted == {} and c.state.extracting == []


def test_a_node_entered_after_the_result_greets_with_it_and_one_entered_before_waits() -> None:
    c = ef.Call(ef.engine(plans()))
    c.call("chat_first")
    assert c.state.node == "chat" and c.state.waiting is None  # chat reads no tier: no wait
    c(ExtractionResult(node="ask", id="ask#1", values={"tier": "gold"}))
    assert says(c.call("go_on")) == [NOTED]
    c2 = ef.Call(ef.engine(plans()))
    c2.call("chat_first")
    assert says(c2.call("go_on")) == ["Hold on."] and c2.state.waiting is not None
    assert says(c2(ExtractionResult(node="ask", values={"tier": "gold"}))) == [NOTED]


def test_nothing_the_llm_or_the_caller_does_moves_a_waiting_entry() -> None:
    c = ef.Call(ef.engine(plans()))
    c.call("chat_first")
    c.call("go_on")
    before = c.state
    (resp,) = c.call("wrap_up")
    assert isinstance(resp, ToolResponse) and resp.error and c.state == before
    assert c(UserIdle()) == [] and c.state == before
    assert c(DtmfEntered(digits="1", node="noted"))[0].type == "rejected" and c.state == before


def test_a_stale_or_duplicate_result_changes_nothing() -> None:
    c = ef.Call(ef.engine(plans()))
    c.call("check")
    c(ExtractionResult(node="ask", id="ask#1", values={"tier": "gold"}))
    done = c.state
    assert c(ExtractionResult(node="ask", id="ask#1", values={"tier": "basic"}))[0].type == "rejected"
    assert c.state == done


def test_validate_warns_where_a_gate_reads_what_the_node_before_it_extracts() -> None:
    report = validate_data(plans(), base_dir=ef.FIXTURES, source="t")
    assert report.definition is not None, report.errors
    (warning,) = [w for w in report.warnings if "nodes.route" in str(w)]
    assert "'tier', extracted when the call leaves 'ask'" in str(warning) and "capture" in str(warning)


def test_an_action_nodes_request_reading_the_value_waits_for_it() -> None:
    eng = ef.engine(
        ef.flow(
            {
                "ask": ef.agent(ef.go("look", "fetch"), extract=TIER),
                "fetch": ef.action(
                    {**ef.http("lookup_plan"), "http": {"method": "GET", "url": "https://api.test/{{tier}}"}},
                    "done",
                ),
                "done": ef.end(),
            }
        )
    )
    c = ef.Call(eng)
    effects = c.call("look")
    assert not [e for e in effects if e.type == "run_function"] and c.state.waiting is not None
    effects = c(ExtractionResult(node="ask", id="ask#1", values={"tier": "gold"}))
    (run,) = [e for e in effects if e.type == "run_function"]
    assert run.http is not None and run.http.url == "https://api.test/gold"
