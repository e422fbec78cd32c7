"""Listen modes and empty input end to end (issue 15, section 3): ``ringflow call simulate``
plays the kiosk example (push-to-talk, ``on_give_up: wait``) and an ``auto`` variant through
the real workflow on the dev server and the real agent in livekit-agents text mode, its
LLM the scripted OpenAI-compatible endpoint (the only fake: no model runs here). An empty
turn goes through the agent's own detection code (``agents/listen.py``): the push-to-talk
start/end on a ``manual`` node, the speaking-then-no-words watch elsewhere."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ringflow.simulation.scripts import ScriptError, load_script
from ringflow.simulation.simulator import environment, run_script
from tests.support.agentkit import said
from tests.support.paths import ROOT

SCRIPTS = sorted((ROOT / "examples" / "scripts").glob("kiosk_*.yaml"))
FLOW = ROOT / "examples" / "flows" / "kiosk" / "flow.yaml"
GREETING = "Welcome to the Harbour Hotel. Hold the button and tell me the name on your booking."


def heard(result: Any) -> list[str]:
    return [t["text"] for t in result.transcript if t["role"] == "assistant"]


def idle_prompts(llm: Any, call_id: str) -> list[str]:
    """The instructions of each LLM turn the agent started on its own (an idle re-prompt)."""
    return [
        s[-1]
        for r in llm.lane(call_id).of_kind("chat")
        if (s := said(r, "system")) and "empty input" in s[-1]
    ]


@pytest.mark.timeout(300)
async def test_kiosk_scripts_pass_also_with_the_agent_killed_on_every_turn(temporal_server: Any) -> None:
    assert len(SCRIPTS) == 4  # kiosk_scanned_id: the screen's device tool
    async with environment(temporal_server.address) as (client, task_queue, llm, _):
        results = {p.stem: await run_script(p, client, task_queue, llm) for p in SCRIPTS}
        assert {n: (r.failures, r.error) for n, r in results.items() if not r.ok} == {}
        away = results["kiosk_walked_away"]
        # two prompts (an empty press each), then given up: the silences get no prompt and
        # no goodbye, and the call stays open until the script ends it
        assert heard(away)[0] == GREETING and len(heard(away)) == 3
        prompts = idle_prompts(llm, away.call_id)
        assert len(prompts) == 2
        assert "without saying anything" in prompts[0] and "empty input 1 of 2" in prompts[0]
        assert "empty input 2 of 2" in prompts[1] and "wait quietly" in prompts[1]
        assert away.rejected == []  # the workflow took every empty input's kind
        back = results["kiosk_came_back"]
        assert [p.split(" This is")[0] for p in idle_prompts(llm, back.call_id)] == [
            "The caller has been silent for a while.",
            "The caller pressed to talk and released without saying anything.",
        ]
        assert heard(back)[-1] == (
            "Of course. A member of staff is on the way and will be with you in a moment."
        )
        for path in SCRIPTS:
            for turn in range(len(load_script(path)[0].turns)):
                killed = await run_script(path, client, task_queue, llm, kill_at=turn)
                assert killed.ok and killed.kills == 1, (path.name, turn, killed.failures, killed.error)
                base = results[path.stem]
                assert (killed.path, killed.end_reason, killed.disposition) == (
                    base.path,
                    base.end_reason,
                    base.disposition,
                )
                assert len(heard(killed)) == len(heard(base)), (path.name, turn, heard(killed))


async def test_speech_with_no_words_on_an_auto_node_counts_and_ends_the_call(
    temporal_server: Any, tmp_path: Path
) -> None:
    """On an ``auto`` node the empty turn is an ``empty_transcript``; with the default
    ``on_give_up: end`` the third one says the goodbye and the workflow ends ``user_idle``."""
    text = (
        FLOW.read_text()
        .replace("listen: manual", "listen: auto")
        .replace("on_give_up: wait", "on_give_up: end")
    )
    (tmp_path / "flow.yaml").write_text(text)
    (tmp_path / "mumbles.yaml").write_text(
        "flow: flow.yaml\nturns:\n"
        + '  - {user: "", empty: true}\n' * 3
        + "expect: {path: [welcome], end_reason: user_idle}\n"
    )
    async with environment(temporal_server.address) as (client, task_queue, llm, _):
        result = await run_script(tmp_path / "mumbles.yaml", client, task_queue, llm)
        prompts = idle_prompts(llm, result.call_id)
    assert result.ok, (result.failures, result.error)
    assert len(prompts) == 2 and all("no words could be made out" in p for p in prompts)
    assert "the call will end" in prompts[1]
    assert heard(result)[-1] == "Sorry, I can't hear you. Goodbye."


@pytest.mark.parametrize(
    ("turn", "says"),
    [
        ('{user: "hi", empty: true}', "give it 'user: \"\"'"),
        ('{user: ""}', "add 'empty: true'"),
        ('{user: "", empty: true, llm: [{say: hi}]}', "no 'llm' replies"),
    ],
)
def test_empty_turns_are_checked_with_a_clear_error(tmp_path: Path, turn: str, says: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(f"flow: {FLOW}\nturns:\n  - {turn}\n")
    with pytest.raises(ScriptError) as exc:
        load_script(path)
    assert "turns.0" in str(exc.value) and says in str(exc.value)
