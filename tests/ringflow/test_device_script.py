"""The kiosk's scripted device (a script's ``device:``): its tool is offered and called over
the RPC shape a real device answers, the call is recorded in the workflow once, and an
agent killed after the call replays the turn without asking the device again."""

from __future__ import annotations

import json

import pytest

from ringflow.devstack import DevStack
from ringflow.simulation.simulator import environment, run_script
from tests.support.paths import ROOT

SCRIPT = ROOT / "examples" / "scripts" / "kiosk_scanned_id.yaml"


@pytest.mark.timeout(300)
async def test_a_device_tool_call_is_recorded_once_and_not_repeated_after_a_kill(
    temporal_server: DevStack,
) -> None:
    async with environment(temporal_server.address) as (client, task_queue, llm, _):
        base = await run_script(SCRIPT, client, task_queue, llm)
        # killed while the next function (find_booking) runs: the device's answer is durable
        killed = await run_script(SCRIPT, client, task_queue, llm, kill_at=0, kill_point="during_function")
    for result in (base, killed):
        assert result.ok, (result.failures, result.error)
        assert [c["name"] for c in result.device_calls] == ["scan_id"]  # asked once
        tools = [json.loads(t["text"]) for t in result.transcript if t["role"] == "tool"]
        assert tools == [
            {"device_tool": "scan_id", "args": {}, "result": {"name": "Morgan Lee", "document": "passport"}}
        ]
    assert killed.kills == 1 and (killed.path, killed.state) == (base.path, base.state)
