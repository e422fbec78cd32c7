"""Scripts with ``dial:`` play phone calls: the real workflow dials through the real LiveKit
telephony code against the LiveKit fake, and the real agent (text mode) takes the call when
it is answered. Checked: where each call went and what the callee heard."""

from __future__ import annotations

import asyncio

import pytest
from typer.testing import CliRunner

from ringflow.cli import app
from ringflow.devstack import DevStack
from ringflow.simulation.simulator import environment, run_script
from ringflow.workflows.client import CallHandle
from tests.support.paths import ROOT

SCRIPTS = ROOT / "examples" / "scripts"


def heard(result: object) -> list[str]:
    return [t["text"] for t in result.transcript if t["role"] == "assistant"]  # type: ignore[attr-defined]


def notes(result: object) -> list[str]:
    return [t["text"] for t in result.transcript if t["role"] == "system"]  # type: ignore[attr-defined]


async def test_every_dial_outcome_and_what_the_callee_heard(
    temporal_server: DevStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with environment(temporal_server.address) as (client, task_queue, llm, _):
        run = {
            name: await run_script(SCRIPTS / f"outbound_reminder_{name}.yaml", client, task_queue, llm)
            for name in ("will_pay", "voicemail", "busy", "no_answer", "dial_failed")
        }
        killed = await run_script(
            SCRIPTS / "outbound_reminder_will_pay.yaml", client, task_queue, llm, kill_at=0
        )
        records = {n: await CallHandle(client, r.call_id).handle.result() for n, r in run.items()}
    assert {n: r.failures for n, r in run.items() if not r.ok} == {}
    # The record says how the network answered and who picked up, as fields (issue 11)
    sip = {n: (r.sip.outcome, r.sip.code, r.sip.status) for n, r in records.items() if r.sip}
    assert sip == {
        "will_pay": ("answered", 200, "OK"),
        "voicemail": ("answered", 200, "OK"),
        "busy": ("busy", 486, "Busy Here"),
        "no_answer": ("no_answer", 408, "Request Timeout"),
        "dial_failed": ("dial_failed", 503, "Service Unavailable"),
    }
    amd = {n: r.amd for n, r in records.items() if r.amd is not None}
    assert {n: (v.result, v.category) for n, v in amd.items()} == {
        "will_pay": ("human", "human"),
        "voicemail": ("machine", "machine-vm"),
    }  # nobody picked up the others: no verdict
    assert amd["will_pay"].speech_s == 1.2 and amd["will_pay"].delay_s == 0.4 and amd["will_pay"].at
    assert all(r.room == r.call_id for r in records.values())  # a dialed call's room is named after it
    monkeypatch.setenv("RINGFLOW_TEMPORAL_ADDRESS", temporal_server.address)
    shown = await asyncio.to_thread(CliRunner().invoke, app, ["call", "show", run["busy"].call_id])
    assert shown.exit_code == 0, shown.output
    assert "'code': 486" in shown.output and "'status': 'Busy Here'" in shown.output  # the sip line
    shown = await asyncio.to_thread(CliRunner().invoke, app, ["call", "show", run["will_pay"].call_id])
    assert "'result': 'human'" in shown.output  # the amd line
    assert heard(run["will_pay"]) == [
        "Hi Dana, this is Ava from Northside Energy with a quick reminder.",
        "Thank you, Dana. Goodbye!",
    ]
    assert notes(run["will_pay"])[0] == "dial: answered (SIP 200 OK)"
    assert heard(run["voicemail"]) == [
        "Hi Dana, this is Ava from Northside Energy: a reminder that your payment is due on Friday. "
        "Please call us back at 555 0100. Goodbye."
    ]  # the message, and no greeting to a machine
    assert "answering machine detected (machine-vm)" in notes(run["voicemail"])
    assert notes(run["busy"]) == ["dial: busy (SIP 486 Busy Here)"] and heard(run["busy"]) == []
    assert notes(run["no_answer"]) == ["dial: no_answer (SIP 408 Request Timeout)"]
    assert notes(run["dial_failed"])[0].startswith("dial: dial_failed (SIP 503 Service Unavailable)")
    assert killed.ok and killed.kills == 1 and heard(killed) == heard(run["will_pay"])


async def test_phone_examples_pass_with_the_agent_killed_on_every_turn(temporal_server: DevStack) -> None:
    """The issue's bar for the telephony examples: each script passes as it is and with the
    agent killed (and replaced) during each of its turns."""
    from ringflow.simulation.scripts import load_script

    scripts = sorted([*SCRIPTS.glob("outbound_reminder_*.yaml"), *SCRIPTS.glob("ivr_menu_*.yaml")])
    failed: dict[str, list[str]] = {}
    async with environment(temporal_server.address) as (client, task_queue, llm, _):
        for path in scripts:
            turns = len(load_script(path)[0].turns)
            for kill_at in [None, *range(turns)]:
                r = await run_script(path, client, task_queue, llm, kill_at=kill_at)
                if not r.ok or (kill_at is not None and r.kills != 1):
                    failed[f"{path.name} kill_at={kill_at}"] = r.failures or [f"kills={r.kills}"]
    assert failed == {}


async def test_a_transfer_hands_the_caller_over_once_and_a_refused_one_falls_back(
    temporal_server: DevStack,
) -> None:
    async with environment(temporal_server.address) as (client, task_queue, llm, _):
        done = await run_script(SCRIPTS / "ivr_menu_transfer.yaml", client, task_queue, llm)
        busy = await run_script(SCRIPTS / "ivr_menu_transfer_no_answer.yaml", client, task_queue, llm)
    assert done.ok and done.end_reason == "transferred"
    assert done.transfer is not None and (done.transfer["to"], done.transfer["mode"]) == ("+15550199", "warm")
    assert "pressed 2 and asked for a person" in done.transfer["announce"]  # what the person heard first
    assert heard(done)[-1] == "Connecting you to a person now."
    assert busy.ok and busy.path[-2:] == ["desk_busy", "goodbye"]
    assert "nobody at the desk is free" in " ".join(heard(busy))


async def test_a_simulated_kill_reaches_the_workflow_as_livekit_s_webhook(temporal_server: DevStack) -> None:
    async with environment(temporal_server.address) as (client, task_queue, llm, _):
        r = await run_script(
            SCRIPTS / "ivr_menu_billing_keys.yaml", client, task_queue, llm, kill_at=1, resume="dispatch"
        )
        state = await CallHandle(client, r.call_id).state()
    assert r.ok and r.kills == 1, r.failures
    assert any("left the room (SIGNAL_CLOSE) without hanging up" in x.reason for x in state.rejected)


async def test_transfers_reach_the_caller_in_a_room_livekit_named(temporal_server: DevStack) -> None:
    """An inbound call's room is named by LiveKit's dispatch rule (``call-_<number>_<random>``)
    and its call id derived from it: transfers (cold and warm) and the webhook of a killed
    agent must go by the call's room, not by its id."""
    async with environment(temporal_server.address) as (client, task_queue, llm, _):
        warm = await run_script(SCRIPTS / "ivr_menu_transfer.yaml", client, task_queue, llm, inbound=True)
        cold = await run_script(SCRIPTS / "ivr_menu_billing_desk.yaml", client, task_queue, llm, inbound=True)
        killed = await run_script(
            SCRIPTS / "ivr_menu_billing_keys.yaml",
            client,
            task_queue,
            llm,
            kill_at=1,
            resume="dispatch",
            inbound=True,
        )
        records = [await CallHandle(client, r.call_id).handle.result() for r in (warm, cold, killed)]
    for r, rec in zip((warm, cold, killed), records, strict=True):
        assert r.ok, (r.script, r.failures, r.error)
        assert rec.room is not None and rec.room.startswith("call-_+1555") and rec.room != rec.call_id
        assert rec.sip is None and rec.amd is None  # not dialed: nothing from the line to record
    assert warm.end_reason == cold.end_reason == "transferred"
    assert warm.transfer is not None and warm.transfer["mode"] == "warm"
    assert cold.transfer == {"to": "+15550198", "mode": "cold"}
    assert killed.kills == 1
