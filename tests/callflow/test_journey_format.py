"""The flow's journey keys (``journey: {callback_node}``, an end node's ``follow_up``) are
checked where they are written, and a journey's call starts where and with what the
journey says, on the engine both the agent and the workflow run."""

from __future__ import annotations

from typing import Any

from ringflow.callflow.effects import Rejected, Say, SetNode
from ringflow.callflow.engine import Engine
from ringflow.callflow.events import CallStarted
from ringflow.callflow.journey import JourneyContext, JourneyStart, requested_follow_up
from ringflow.callflow.loader import validate_data


def flow(**goodbye: Any) -> dict[str, Any]:
    return {
        "flow": "check_in",
        "journey": {"callback_node": "welcome_back"},
        "nodes": {
            "greet": {
                "task": "Ask how it goes.",
                "greeting": "Hello!",
                "functions": [
                    {
                        "name": "bye",
                        "transition_only": True,
                        "description": "Bye.",
                        "transition_to": "goodbye",
                    }
                ],
            },
            "welcome_back": {
                "task": "Welcome them back.",
                "functions": [
                    {
                        "name": "bye",
                        "transition_only": True,
                        "description": "Bye.",
                        "transition_to": "goodbye",
                    }
                ],
            },
            "goodbye": {"type": "end", "task": "Say goodbye.", **goodbye},
        },
    }


def errors(data: dict[str, Any]) -> dict[str, str]:
    return {i.path: i.message for i in validate_data(data, load_handlers=False).errors}


def test_follow_up_and_callback_node_are_checked_with_where_and_why() -> None:
    assert errors(flow(follow_up={"after": "2d", "at": "10:00", "node": "greet", "say": "Hi again."})) == {}
    bad = errors(flow(follow_up={"after": "two days", "at": "25:00", "node": "gret"}))
    assert any("two days" in m and "2d" in m for m in bad.values()), bad
    assert any("25:00" in m and "HH:MM" in m for m in bad.values()), bad
    wrong_node = errors(flow(follow_up={"after": "1d", "node": "gret"}))
    assert "did you mean 'greet'" in wrong_node["nodes.goodbye.follow_up.node"]
    data = flow()
    data["nodes"]["greet"]["follow_up"] = {"after": "1d"}
    data["journey"] = {"callback_node": "nowhere"}
    got = errors(data)
    assert "only an end node" in got["nodes.greet.follow_up"]
    assert "unknown node 'nowhere'" in got["journey.callback_node"]


def test_a_journeys_call_starts_at_its_node_with_its_state_first_words_and_context() -> None:
    report = validate_data(flow(), load_handlers=False)
    assert report.definition is not None
    engine = Engine(report.definition)
    ctx = JourneyContext(
        journey_id="journey-check_in-abc", call=3, context="- call 2: ended at goodbye", say="Hi again."
    )
    start = JourneyStart(context=ctx, node="welcome_back", state={"tries": 2}, extracted={"mood": "good"})
    step = engine.start(CallStarted(call_id="c1", at=1.0, journey=start))
    assert step.state.path == ["welcome_back"] and step.state.state == {"tries": 2}
    assert step.state.extracted == {"mood": "good"} and step.state.journey == ctx
    shown = next(e for e in step.effects if isinstance(e, SetNode))
    assert shown.prompt.startswith("Welcome them back.") and "- call 2: ended at goodbye" in shown.prompt
    assert [e.text for e in step.effects if isinstance(e, Say)] == ["Hi again."]
    # an agent resuming the call says and shows the same (Engine.arrival from the state alone)
    assert [e for e in engine.arrival(step.state) if isinstance(e, (Say, SetNode))] == [
        e for e in step.effects if isinstance(e, (Say, SetNode))
    ]
    plain = engine.start(CallStarted(call_id="c2", at=1.0))
    assert plain.state.path == ["greet"] and [e.text for e in plain.effects if isinstance(e, Say)] == [
        "Hello!"
    ]
    nowhere = JourneyStart(context=ctx, node="nowhere")
    refused = engine.start(CallStarted(call_id="c3", at=1.0, journey=nowhere))
    assert refused.state.node is None and isinstance(refused.effects[0], Rejected)


def test_a_handlers_follow_up_is_read_or_refused_with_what_was_wrong() -> None:
    assert requested_follow_up(None) is None
    got = requested_follow_up({"after": "3h", "say": "As promised."})
    assert not isinstance(got, str) and got is not None and got.delay_s() == 3 * 3600
    problem = requested_follow_up({"after": "soon"})
    assert isinstance(problem, str) and "state.follow_up" in problem and "soon" in problem
