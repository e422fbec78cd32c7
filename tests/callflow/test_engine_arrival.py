"""``Engine.arrival``: an agent that did not take a step itself (the workflow routed the call
through an action node) hears and shows exactly what the step produced.

The workflow applies the action's result and gets the routed node's effects; the agent only
learns the resulting state. ``arrival(state)`` must rebuild, from that state alone, the
same speech and node effects (set_node, say, llm_turn, end_call) the step emitted, so the
caller cannot tell the two apart.
"""

from __future__ import annotations

import pytest

from ringflow.callflow.effects import EndCall, LLMTurn, Say, SetNode
from ringflow.callflow.engine import Engine
from ringflow.callflow.events import HangUp
from tests.support.engine_flows import HANDLERS, Call, action, agent, build, end, flow, go, table

SPOKEN = (SetNode, Say, LLMTurn, EndCall)

FLOW = build(
    flow(
        {
            "ask": agent(go("next", "route", speech="One moment."), go("stay", "ask")),
            "route": action(
                {"name": "check"},
                table({"found": "found", "error": "failed"}, default="failed"),
                save_as="rec",
            ),
            "found": agent(
                go("done", "bye"),
                greeting="Found {{state.rec.id}}.",
                pre_actions=[{"tts_say": "Good news."}, {"function": "log_entry"}],
                post_actions=[{"tts_say": "Anything else?"}],
            ),
            "failed": end(pre_actions=[{"tts_say": "Sorry."}], disposition="failed"),
            "bye": end(greeting="Bye."),
        },
        handlers=HANDLERS,
    )
)


def routed(result: dict[str, object]) -> tuple[Engine, list[object], Call]:
    """A call moved into the action node, then the action's result applied (as the workflow
    does): the effects that step emitted, and the call after it."""
    eng = Engine(FLOW)
    call = Call(eng)
    call.call("next")
    effects = call.result(result)
    return eng, [e for e in effects if isinstance(e, SPOKEN)], call


@pytest.mark.parametrize("result", [{"status": "found", "id": 7}, {"status": "error"}, {"status": "odd"}])
def test_arrival_rebuilds_what_the_routing_step_said_and_showed(result: dict[str, object]) -> None:
    eng, said, call = routed(result)
    assert said and eng.arrival(call.state) == said


def test_arrival_on_an_agent_node_has_its_pre_actions_greeting_and_post_actions() -> None:
    eng, _, call = routed({"status": "found", "id": 7})
    assert [type(e).__name__ for e in eng.arrival(call.state)] == ["SetNode", "Say", "Say", "Say"]
    assert [e.text for e in eng.arrival(call.state) if isinstance(e, Say)] == [
        "Good news.",
        "Found 7.",
        "Anything else?",
    ]


def test_arrival_after_any_other_ending_is_just_the_end() -> None:
    eng, _, call = routed({"status": "found", "id": 7})
    call(HangUp(reason="user_hangup"))
    assert eng.arrival(call.state) == [EndCall(reason="user_hangup", disposition="user_hangup")]
