"""``ringflow sip setup`` / ``sip list`` against the LiveKit fake, through the real SDK: the
inbound trunk and dispatch rule are created once, updated in place, and carry the flow in
the agent dispatch's metadata, which is what the agent reads to start an inbound call."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ringflow.agents.livekit_api import LiveKitRefused, parse_job_metadata
from ringflow.agents.livekit_inbound import LiveKitInbound
from ringflow.cli import app
from ringflow.simulation.livekit_fake import FakeLiveKit


def inbound(lk: FakeLiveKit) -> LiveKitInbound:
    return LiveKitInbound(lk.url, lk.api_key, lk.api_secret, agent_name="ringflow-test")


async def test_setup_creates_once_then_updates_in_place(lk: FakeLiveKit) -> None:
    first = await inbound(lk).setup("+15550100", "flows/ivr.yaml")
    again = await inbound(lk).setup("+15550100", "flows/ivr.yaml")
    moved = await inbound(lk).setup("+15550100", "flows/ivr_v2.yaml")
    assert (first.created, again.created, again.updated) == (["trunk", "rule"], [], [])
    assert moved.updated == ["rule"]
    assert first.trunk_id == again.trunk_id == moved.trunk_id and first.rule_id == moved.rule_id
    assert len(lk.inbound_trunks) == 1 and len(lk.dispatch_rules) == 1
    (rule,) = lk.dispatch_rules.values()
    assert rule.rule.dispatch_rule_individual.room_prefix == "call-"
    (agent,) = rule.room_config.agents
    assert agent.agent_name == "ringflow-test"
    assert parse_job_metadata(agent.metadata).flow == "flows/ivr_v2.yaml"  # what the agent will read
    rows = await inbound(lk).list()
    assert rows == [
        {
            "number": "+15550100",
            "trunk_id": first.trunk_id,
            "trunk": "ringflow +15550100",
            "rule_id": first.rule_id,
            "flow": "flows/ivr_v2.yaml",
            "agent": "ringflow-test",
        }
    ]


async def test_a_second_number_on_a_named_trunk_gets_its_own_rule(lk: FakeLiveKit) -> None:
    first = await inbound(lk).setup("+15550100", "a.yaml")
    second = await inbound(lk).setup("+15550101", "b.yaml", trunk_id=first.trunk_id)
    assert second.updated == ["trunk"] and second.created == ["rule"]
    assert list(lk.inbound_trunks[first.trunk_id].numbers) == ["+15550100", "+15550101"]
    flows = {r["number"]: r["flow"] for r in await inbound(lk).list()}
    assert flows == {"+15550100": "a.yaml", "+15550101": "b.yaml"}
    with pytest.raises(LiveKitRefused, match="no inbound trunk ST_missing"):
        await inbound(lk).setup("+15550102", "c.yaml", trunk_id="ST_missing")


def test_sip_commands_say_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LIVEKIT_URL", "LIVEKIT_API_KEY", "LIVEKIT_API_SECRET"):
        monkeypatch.delenv(name, raising=False)
    runner = CliRunner()
    bad = runner.invoke(app, ["sip", "setup", "--number", "call me", "--flow", "x.yaml"])
    assert bad.exit_code == 2 and "--number" in bad.output
    unconfigured = runner.invoke(app, ["sip", "list", "--json"])
    assert unconfigured.exit_code == 2 and "LIVEKIT_URL" in unconfigured.output
    assert "Traceback" not in bad.output + unconfigured.output
