"""Scripts that check what was said, and simulate's answers when a script goes wrong:
the transcript and every refusal, one result per script, clean errors, ``call show``."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ringflow.cli import app
from ringflow.devstack import DevStack, free_port
from ringflow.simulation.demo import run_demo
from ringflow.simulation.scripts import Expect, ScriptError, check, load_script, said_failures
from ringflow.simulation.simulator import simulate
from ringflow.workflows.worker import prometheus_runtime
from tests.support.paths import ROOT
from tests.support.wfkit import wait_until

FLOW = ROOT / "examples" / "flows" / "appointment_reminder" / "flow.yaml"
VARS = "variables: {patient_first_name: Robin, appointment_time: Tuesday at 3 PM}\n"

GOOD = f"""flow: {FLOW}
{VARS}turns:
  - user: "Yes, this is Robin."
    llm: [{{say: "Thanks, Robin. Could you tell me your year of birth?"}}]
  - user: "Nineteen eighty-seven."
    llm:
      - call: check_identity
        args: {{birth_year: "1987"}}
      - say: "You have an appointment on Tuesday at 3 PM. Can you make it?"
  - user: "Yes."
    llm: [{{call: will_attend}}, {{say: "Wonderful. Goodbye!"}}]
expect:
  path: [verify_identity, remind, confirmed]
  said: ["this is Ava from Maple Grove", "YEAR OF BIRTH", "appointment on Tuesday", "goodbye"]
  not_said: ["I'm an AI"]
"""

# The LLM calls a function the node does not offer, then one with an argument too many: the
# call never leaves the first node, and the author must see why.
REFUSED = f"""flow: {FLOW}
{VARS}turns:
  - user: "Yes, this is Robin."
    llm: [{{call: will_attend}}, {{say: "Could you tell me your year of birth?"}}]
  - user: "Nineteen eighty-seven."
    llm:
      - call: check_identity
        args: {{birth_year: "1987", shoe_size: 44}}
      - say: "Sorry, one moment."
expect:
  path: [verify_identity, remind]
  said: ["year of birth", "appointment"]
  not_said: ["sorry"]
"""


def test_said_in_order_case_insensitive_with_turns_between() -> None:
    t = [
        {"role": "assistant", "text": "Hi, this is Ava."},
        {"role": "user", "text": "the renewal price?"},
        {"role": "assistant", "text": "One moment."},
        {"role": "assistant", "text": "The Renewal Price is 5."},
    ]
    assert said_failures(["this is ava", "renewal price", "is 5"], ["I'm an AI"], t) == []
    assert said_failures(["renewal price", "this is Ava"], None, t) == [
        "said[1]: 'this is Ava' is said (assistant turn 0) only before 'renewal price', which must come first"
    ]
    assert said_failures(["the renewal price?"], None, t) == [  # the caller said it, not the bot
        "said[0]: 'the renewal price?' is in no assistant turn"
    ]
    assert said_failures(None, ["one MOMENT"], t) == [
        "not_said[0]: 'one MOMENT' is said in assistant turn 1: 'One moment.'"
    ]
    assert check(Expect(said=["ava"], not_said=["nope"]), {"transcript": t}) == []


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("expect: {sayd: [hello]}", "expect.sayd: Extra inputs are not permitted (did you mean 'said'?)"),
        ("expect: {not_sayd: [x]}", "did you mean 'not_said'?"),
        ("turns: [{usr: hi}]", "turns.0.usr: Extra inputs are not permitted (did you mean 'user'?)"),
        ("extracts: {}", "did you mean 'extract'?"),
        ("turns: [{user: hi, llm_dealy_s: 1}]", "did you mean 'llm_delay_s'?"),
    ],
)
def test_a_misspelt_script_key_gets_did_you_mean(tmp_path: Path, text: str, hint: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(f"flow: {FLOW}\n{text}\n")
    with pytest.raises(ScriptError) as err:
        load_script(path)
    assert hint in str(err.value)


@pytest.mark.parametrize(
    ("delay", "error"),
    [("0", "turns.0.llm_delay_s: Input should be greater than 0"), ("31", "less than or equal to 30")],
)
def test_a_turn_s_llm_delay_out_of_range_is_named(tmp_path: Path, delay: str, error: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(f"flow: {FLOW}\nturns: [{{user: hi, llm_delay_s: {delay}}}]\n")
    with pytest.raises(ScriptError) as err:
        load_script(path)
    assert error in str(err.value) and str(path) in str(err.value)


def test_a_missing_variable_is_one_error_line(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(f"flow: {FLOW}\nvariables: {{patient_first_name: Robin}}\nturns: []\n")
    res = CliRunner().invoke(app, ["call", "simulate", "--address", "127.0.0.1:9", str(path)])
    assert res.exit_code == 2
    assert res.output.splitlines() == [
        f"error: {path}: variables.appointment_time: required variable 'appointment_time' was not given "
        "when the call started"
    ]


async def test_every_script_gets_its_own_result(temporal_server: DevStack, tmp_path: Path) -> None:
    """A script that raises (here: its call cannot start) is a failed result, and the run goes on."""
    (tmp_path / "missing.yaml").write_text(f"flow: {FLOW}\nvariables: {{patient_first_name: Robin}}\n")
    (tmp_path / "good.yaml").write_text(GOOD)
    missing, good = await simulate(
        [tmp_path / "missing.yaml", tmp_path / "good.yaml"], address=temporal_server.address
    )
    assert not missing.ok and "required variable 'appointment_time'" in (missing.error or "")
    assert good.ok, good.failures


def test_failing_script_shows_transcript_and_refusals(
    temporal_server: DevStack, tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "refused.yaml").write_text(REFUSED)
    (tmp_path / "good.yaml").write_text(GOOD)
    runner = CliRunner()
    addr = ["--address", temporal_server.address]
    res = runner.invoke(
        app,
        ["call", "simulate", *addr, "--json", str(tmp_path / "refused.yaml"), str(tmp_path / "good.yaml")],
    )
    assert res.exit_code == 1, res.output
    refused, good = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert good["ok"] and good["transcript"][-1] == {
        "role": "assistant",
        "node": "confirmed",
        "text": "Wonderful. Goodbye!",
    }
    assert not refused["ok"] and refused["path"] == ["verify_identity"]
    assert refused["transcript"][0] == {
        "role": "assistant",
        "node": "verify_identity",
        "text": "Hello, this is Ava from Maple Grove Dental. Am I speaking with Robin?",
    }
    assert [t["role"] for t in refused["transcript"]] == ["assistant", "user"] * 2 + ["assistant"]
    why = {r["what"]: r for r in refused["rejected"]}
    assert why["will_attend"]["arguments"] == {}
    assert "not a function of this node" in why["will_attend"]["why"]
    assert why["check_identity"]["arguments"] == {"birth_year": "1987", "shoe_size": 44}
    assert "shoe_size" in why["check_identity"]["why"]
    assert "said[1]: 'appointment' is in no assistant turn" in refused["failures"]
    assert "not_said[0]: 'sorry' is said in assistant turn 2: 'Sorry, one moment.'" in refused["failures"]

    text = runner.invoke(app, ["call", "simulate", *addr, str(tmp_path / "refused.yaml")])
    assert text.exit_code == 1
    out = text.output
    assert "[verify_identity] user: Nineteen eighty-seven." in out
    assert "will_attend({}): not a function of this node" in out
    assert 'check_identity({"birth_year": "1987", "shoe_size": 44}) on verify_identity:' in out
    show_line = next(line for line in out.splitlines() if "ringflow call show" in line)
    assert f"RINGFLOW_TEMPORAL_ADDRESS={temporal_server.address}" in show_line

    # The simulation's worker is gone: the ended call is read from its record.
    monkeypatch.setenv("RINGFLOW_TEMPORAL_ADDRESS", temporal_server.address)
    shown = runner.invoke(app, ["call", "show", "--json", show_line.split()[-1]])
    assert shown.exit_code == 0, shown.output
    call = json.loads(shown.output)
    assert call["path"] == ["verify_identity"] and call["end_reason"] == "user_hangup"
    assert call["transcript"][-1]["text"] == "Sorry, one moment."


async def test_the_make_run_demo_is_counted_in_the_dev_metrics(temporal_server: DevStack) -> None:
    """`make run` plays its demo through the simulator, whose worker is its own: its calls
    must be exported by the dev stack's metrics runtime, not by a runtime nobody scrapes."""
    port = free_port()
    runtime = prometheus_runtime(port)
    result = await run_demo(
        temporal_server.address,
        temporal_server.ui_address,
        "default",
        ROOT / "examples" / "scripts" / "appointment_reminder_confirmed.yaml",
        None,
        runtime=runtime,
    )
    assert result.ok, result.failures

    async def scraped() -> str | None:
        body = await asyncio.to_thread(
            lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        )
        return body if "ringflow_calls_ended_total{" in body else None

    body = await wait_until(scraped, what="the demo's calls in the metrics")
    assert re.search(r'ringflow_calls_started_total\{[^}]*flow="appointment_reminder"[^}]*\} 1\b', body)
    assert re.search(r"ringflow_transitions_total\{[^}]*\} [1-9]", body)
