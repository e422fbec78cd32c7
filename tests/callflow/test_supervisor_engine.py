"""Supervisors in the engine (``SupervisorAction``): a takeover pauses the flow (no tools, no
idle rule, no key routing), a hand-back resumes where the bot was with a turn that carries on
or enters the node the supervisor picked, a whisper changes nothing here, and an action seen
already (a successor agent meeting it again) is applied once."""

from __future__ import annotations

from ringflow.callflow.effects import Extract, LLMTurn, Rejected, SetNode, ToolResponse
from ringflow.callflow.engine import HANDBACK_INSTRUCTIONS, Engine
from ringflow.callflow.events import CallStarted, DtmfEntered, FunctionCalled, SupervisorAction, UserIdle
from ringflow.callflow.state import CallState
from tests.support import engine_flows as ef

FLOW = ef.flow(
    {
        "ask": ef.agent(ef.go("next", "offer"), greeting="Hello!", extract=[{"name": "x", "type": "string"}]),
        "offer": ef.agent(ef.go("next", "bye"), task="Offer a slot.", respond_immediately=False),
        "bye": ef.end(),
    },
    start="ask",
)


def started() -> tuple[Engine, CallState]:
    eng = ef.engine(FLOW)
    return eng, eng.start(CallStarted(call_id="s1", at=ef.T0)).state


def act(
    eng: Engine, state: CallState, n: int, action: str, node: str | None = None
) -> tuple[CallState, list]:
    step = eng.apply(state, SupervisorAction(id=n, action=action, node=node, at=ef.T0 + n))  # type: ignore[arg-type]
    return step.state, step.effects


def test_a_takeover_pauses_tools_idle_and_keys_until_the_handback() -> None:
    eng, s = started()
    s, effects = act(eng, s, 1, "takeover")
    assert s.takeover and s.supervisor_seen == 1 and effects == []
    tool = eng.apply(s, FunctionCalled(name="next", node="ask", at=ef.T0 + 2))
    assert tool.state == s and ef.only(tool.effects, ToolResponse).error
    assert "supervisor has the call" in ef.only(tool.effects, ToolResponse).result["error"]
    idle = eng.apply(s.model_copy(update={"idle_count": 1}), UserIdle(at=ef.T0 + 3))
    assert idle.effects == [] and idle.state.idle_count == 1  # the idle rule does not count
    keys = eng.apply(s, DtmfEntered(digits="1", at=ef.T0 + 4))
    assert keys.effects == [] and keys.state == s


def test_a_handback_where_the_bot_was_shows_the_node_and_carries_on_without_greeting() -> None:
    eng, s = started()
    s, _ = act(eng, s, 1, "takeover")
    s, effects = act(eng, s, 2, "handback")
    assert not s.takeover and s.node == "ask" and s.path == ["ask"] and s.transitions == 0
    shown = ef.only(effects, SetNode)
    assert shown.node == "ask" and shown.context == "append"
    assert ef.only(effects, LLMTurn) == LLMTurn(reason="handback", instructions=HANDBACK_INSTRUCTIONS)


def test_a_handback_at_another_node_is_a_transition_with_the_nodes_extraction() -> None:
    eng, s = started()
    s, _ = act(eng, s, 1, "takeover")
    s, effects = act(eng, s, 2, "handback", "offer")
    assert (s.node, s.path, s.transitions, s.takeover) == ("offer", ["ask", "offer"], 1, False)
    assert ef.only(effects, Extract).node == "ask"  # what was said on ask is extracted, as on any exit
    assert ef.only(effects, SetNode).node == "offer"
    assert ef.only(effects, LLMTurn).reason == "handback"  # offer has no greeting: the bot speaks first
    moved = eng.apply(s, FunctionCalled(name="next", node="offer", at=ef.T0 + 9))
    assert moved.state.node == "bye"  # the tools work again


def test_a_whisper_changes_nothing_but_the_seen_mark_and_a_repeat_is_applied_once() -> None:
    eng, s = started()
    w, effects = act(eng, s, 1, "whisper")
    assert effects == [] and w == s.model_copy(update={"supervisor_seen": 1, "now": ef.T0 + 1})
    t, _ = act(eng, w, 2, "takeover")
    again, effects = act(eng, t, 2, "takeover")
    assert again == t and effects == []
    old, effects = act(eng, t, 1, "whisper")
    assert old == t and effects == []


def test_a_handback_without_a_takeover_or_at_an_unknown_node_or_on_an_ended_call() -> None:
    eng, s = started()
    s2, effects = act(eng, s, 1, "handback")
    assert not s2.takeover and s2.node == "ask" and effects == []  # nothing to hand back: only seen
    t, _ = act(eng, s, 1, "takeover")
    bad = eng.apply(t, SupervisorAction(id=2, action="handback", node="nowhere", at=ef.T0))
    assert bad.state == t and "nowhere" in ef.only(bad.effects, Rejected).reason
    ended = t.model_copy(update={"ended": True, "end_reason": "user_hangup"})
    late = eng.apply(ended, SupervisorAction(id=2, action="handback", at=ef.T0))
    assert late.state == ended and ef.only(late.effects, Rejected)
