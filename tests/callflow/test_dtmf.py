"""Key presses (DTMF): the flow format's ``dtmf:`` on agent nodes and ``send_dtmf`` entries,
in the pure engine and the validator."""

from __future__ import annotations

from typing import Any

import yaml

from ringflow.callflow.effects import Rejected, SetNode, ToolResponse
from ringflow.callflow.engine import Engine
from ringflow.callflow.events import CallStarted, DtmfEntered, FunctionCalled
from ringflow.callflow.loader import load_flow, validate_data
from tests.support.wfkit import FIXTURES


def started() -> tuple[Engine, Any]:
    eng = Engine(load_flow(FIXTURES / "ivr.yaml"))
    return eng, eng.start(CallStarted(call_id="c1", at=1.0)).state


def test_collected_keys_route_like_a_capture_and_are_kept_in_the_state() -> None:
    eng, state = started()
    step = eng.apply(state, DtmfEntered(node="menu", digits="2", at=2.0))
    assert step.state.node == "support" and step.state.state["digits"] == "2"
    assert [e.node for e in step.effects if isinstance(e, SetNode)] == ["support"]
    again = eng.apply(state, DtmfEntered(node="menu", digits="9", at=2.0))  # the default: ask again
    assert again.state.node == "menu" and again.state.path == ["menu", "menu"]


def test_keys_for_another_node_or_after_the_end_are_refused_and_change_nothing() -> None:
    eng, state = started()
    stale = eng.apply(state, DtmfEntered(node="billing", digits="1", at=2.0))
    assert stale.state == state and isinstance(stale.effects[0], Rejected)
    ended = eng.apply(state, DtmfEntered(node="menu", digits="1", at=2.0)).state
    assert isinstance(eng.apply(ended, DtmfEntered(node="billing", digits="1")).effects[0], Rejected)
    malformed = eng.apply(state, {"type": "dtmf_entered", "digits": "1; drop", "node": "menu"})
    assert malformed.state == state and "malformed event" in malformed.effects[0].reason


def test_send_dtmf_is_a_tool_with_a_digits_argument_that_moves_nothing() -> None:
    eng, state = started()
    tool = next(t for t in eng.snapshot(state).tools if t.name == "press_keys")
    assert tool.parameters["required"] == ["digits"]
    step = eng.apply(state, FunctionCalled(name="press_keys", args={"digits": "1234#"}, node="menu"))
    assert step.state.node == "menu"
    assert step.effects[0] == ToolResponse(
        name="press_keys", result={"status": "ok", "pressed": "1234#"}, run_llm=True
    )
    bad = eng.apply(state, FunctionCalled(name="press_keys", args={"digits": "call me"}, node="menu"))
    assert bad.effects[0].error  # type: ignore[union-attr]


def test_the_validator_names_what_is_wrong_with_dtmf_and_voicemail() -> None:
    data = yaml.safe_load((FIXTURES / "ivr.yaml").read_text())
    data["settings"]["voicemail"]["node"] = "menu"
    data["nodes"]["menu"]["dtmf"]["transition_to"]["field"] = "keys"
    data["nodes"]["menu"]["dtmf"]["transition_to"]["cases"]["3"] = "nowhere"
    data["nodes"]["menu"]["functions"][0]["transition_to"] = "billing"
    data["nodes"]["billing"]["dtmf"] = {"max_digits": 2}
    report = validate_data(data)
    got = {(i.path, i.message.split(":")[0]) for i in report.errors}
    paths = {p for p, _ in got}
    assert paths == {
        "settings.voicemail.node",
        "nodes.menu.dtmf.transition_to.field",
        "nodes.menu.dtmf.transition_to.cases.3",
        "nodes.menu.functions[0].transition_to",
        "nodes.billing.dtmf",
    }, got
    data["nodes"]["menu"]["dtmf"]["max_digits"] = 0
    assert any(i.path == "nodes.menu.dtmf.max_digits" for i in validate_data(data).errors)


async def test_a_script_presses_keys_through_the_real_workflow_and_agent(temporal_server: Any) -> None:
    from ringflow.simulation.simulator import environment, run_script
    from ringflow.workflows.client import CallHandle

    script = FIXTURES.parent / "scripts" / "ivr_support_keys.yaml"
    async with environment(temporal_server.address) as (client, task_queue, llm, _):
        result = await run_script(script, client, task_queue, llm)
        killed = await run_script(script, client, task_queue, llm, kill_at=1)
        transcript = await CallHandle(client, result.call_id).transcript()
    assert result.ok, result.failures
    assert result.sent_dtmf == ["0#"]  # the bot pressed keys on the line
    assert killed.ok and killed.kills == 1, killed.failures
    said = [(t.role, t.text) for t in transcript]
    assert ("user", "[keys 2]") in said  # the keys are in the call's transcript
    assert said[-1] == ("assistant", "Support will call you back today. Goodbye.")


async def test_keys_are_collected_to_the_limit_the_terminator_or_the_timeout() -> None:
    """The collector between LiveKit's one-key events and the controller (a stand-in here that
    records what it is given; the controller itself is exercised by the script test above)."""
    import asyncio
    from types import SimpleNamespace

    from ringflow.agents.dtmf import KeyCollector

    data = yaml.safe_load((FIXTURES / "ivr.yaml").read_text())
    one = validate_data(data).definition
    data["nodes"]["menu"]["dtmf"].update(max_digits=4, timeout_s=0.05)
    four = validate_data(data).definition
    assert one is not None and four is not None
    got: list[str] = []
    done = asyncio.Event()

    async def on_dtmf(digits: str) -> None:
        got.append(digits)
        done.set()

    ctrl = SimpleNamespace(node="menu", engine=Engine(one), ended=False, on_dtmf=on_dtmf)
    keys = KeyCollector(ctrl)  # type: ignore[arg-type]
    await keys.press("7")  # max_digits is 1 on the menu: complete at once
    await keys.press("x")  # not a phone key: ignored
    assert got == ["7"]
    ctrl.engine = Engine(four)
    await keys.press("1")
    await keys.press("2")
    await keys.press("#")  # the terminator ends the digits and is not one of them
    assert got == ["7", "12"]
    done.clear()
    await keys.press("3")
    await asyncio.wait_for(done.wait(), 5)  # nothing more pressed: the timeout sends what there is
    assert got == ["7", "12", "3"]
    keys.close()
