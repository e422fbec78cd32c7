"""Listen modes and empty input in the engine and the validator (issue 15, section 3).

Pure engine: every empty input (silence, speech with no words, an empty push-to-talk
turn) counts toward the idle rule; the LLM's instructions say which kind and which
attempt; real speech resets; ``on_give_up: wait`` leaves the call open and quiet.
"""

from __future__ import annotations

from typing import Any

import pytest

from ringflow.callflow.effects import LLMTurn, SetNode
from ringflow.callflow.events import UserIdle, UserSpoke
from ringflow.callflow.loader import validate_data
from tests.support.engine_flows import Call, agent, end, engine, flow, go, kinds, only


def kiosk(**idle: Any) -> Call:
    nodes = {"a": agent(go("go", "b"), listen="manual"), "b": end(), "c": agent(go("go", "b"))}
    return Call(engine(flow(nodes, settings={"listen": "realtime", "idle": {"prompts": 2, **idle}})))


def test_listen_mode_is_the_nodes_own_else_the_flows() -> None:
    call = kiosk()
    assert only(call.effects, SetNode).listen == "manual"
    assert only(call.call("go"), SetNode).listen == "realtime"  # b says nothing of its own
    default = Call(engine(flow({"a": agent(go("go", "b")), "b": end()})))
    assert only(default.effects, SetNode).listen == "auto"


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        ("silence", "silent"),
        ("empty_transcript", "no words could be made out"),
        ("empty_turn", "without saying anything"),
    ],
)
def test_each_empty_input_kind_counts_and_the_prompt_names_kind_and_attempt(kind: str, words: str) -> None:
    call = kiosk()
    first = only(call(UserIdle(kind=kind)), LLMTurn)  # type: ignore[arg-type]
    second = only(call(UserIdle(kind=kind)), LLMTurn)  # type: ignore[arg-type]
    assert words in first.instructions and words in second.instructions  # type: ignore[operator]
    assert "empty input 1 of 2" in first.instructions  # type: ignore[operator]
    assert "empty input 2 of 2" in second.instructions  # type: ignore[operator]
    assert first.instructions != second.instructions
    assert "the call will end" in second.instructions  # type: ignore[operator]
    assert kinds(call(UserIdle(kind=kind))) == ["say", "end_call"]  # type: ignore[arg-type]
    assert call.state.end_reason == "user_idle"


def test_kinds_mix_toward_one_count_and_real_speech_resets_it() -> None:
    call = kiosk()
    call(UserIdle(kind="silence")), call(UserIdle(kind="empty_turn"))
    assert call.state.idle_count == 2
    call(UserSpoke(at=1.0))
    assert call.state.idle_count == 0
    assert "empty input 1 of 2" in only(call(UserIdle(kind="empty_transcript")), LLMTurn).instructions
    call(UserIdle()), call(UserIdle(kind="empty_turn"))
    assert call.state.ended and call.state.end_reason == "user_idle"


def test_on_give_up_wait_stops_prompting_keeps_the_call_and_speech_starts_over() -> None:
    call = kiosk(on_give_up="wait")
    call(UserIdle(kind="empty_turn"))
    last = only(call(UserIdle()), LLMTurn)
    assert "wait quietly" in last.instructions and "call will end" not in last.instructions  # type: ignore[operator]
    for _ in range(5):  # given up: no prompt, no end, and the state stays bounded
        assert call(UserIdle(kind="empty_transcript")) == []
    assert not call.state.ended and call.state.idle_count == 3
    call(UserSpoke(at=2.0))
    assert "empty input 1 of 2" in only(call(UserIdle()), LLMTurn).instructions
    assert kinds(call.call("go"))[-1] == "end_call" and call.state.end_reason == "completed"


def test_an_unknown_empty_input_kind_is_rejected_unchanged() -> None:
    call = kiosk()
    before = call.state
    effects = call({"type": "user_idle", "kind": "shrug"})
    assert kinds(effects) == ["rejected"] and "kind" in effects[0].reason and call.state == before


@pytest.mark.parametrize(
    ("where", "value", "path", "says"),
    [
        ("settings", {"listen": "push"}, "settings.listen", "'auto', 'manual' or 'realtime'"),
        ("settings", {"idle": {"on_give_up": "hang"}}, "settings.idle.on_give_up", "'end' or 'wait'"),
        ("node", {"listen": "sometimes"}, "nodes.a.listen", "'auto', 'manual' or 'realtime'"),
        ("gate", {"listen": "manual"}, "nodes.g.listen", "does not apply to a gate node"),
        (
            "node",
            {"listen": "realtime", "allow_interrupt": False},
            "nodes.a.allow_interrupt",
            "must be able to interrupt",
        ),
        ("settings", {"listen": "realtime"}, "nodes.b.allow_interrupt", "must be able to interrupt"),
    ],
)
def test_new_keys_are_validated_with_a_path(where: str, value: Any, path: str, says: str) -> None:
    nodes: dict[str, Any] = {
        "a": agent(go("go", "g")),
        "b": end(allow_interrupt=False),
        "g": {"type": "gate", "branches": [], "default": "b"},
    }
    top: dict[str, Any] = {}
    if where == "settings":
        top["settings"] = value
    elif where == "node":
        nodes["a"] = {**nodes["a"], **value}
    else:
        nodes["g"] = {**nodes["g"], **value}
    report = validate_data(flow(nodes, **top), source="t.yaml")
    assert report.definition is None
    hits = [e for e in report.errors if str(e.path) == path]
    assert hits, [str(e) for e in report.errors]
    assert says in hits[0].message
