"""``ringflow call whisper|takeover|handback CALL_ID`` against a real dev server and worker:
each sends the ``supervise`` update and prints what the call recorded (``--json``: one
object), a refusal is the workflow's reason and exit code 1, never a traceback."""

from __future__ import annotations

import asyncio
import json

import pytest
from temporalio.client import Client
from typer.testing import CliRunner, Result

from ringflow.cli import app
from tests.support.wfkit import running_worker, start, wait_state


async def test_supervisor_commands_record_refuse_and_show_the_takeover(
    monkeypatch: pytest.MonkeyPatch,
    temporal_server: object,
    temporal_client: Client,
    task_queue: str,
    sqlite_url: str,
) -> None:
    monkeypatch.setenv("RINGFLOW_TEMPORAL_ADDRESS", temporal_server.address)  # type: ignore[attr-defined]
    monkeypatch.setenv("RINGFLOW_TASK_QUEUE", task_queue)
    runner = CliRunner()

    async def cli(*args: str) -> Result:
        res = await asyncio.to_thread(runner.invoke, app, ["call", *args])
        assert "Traceback" not in res.output, res.output
        return res

    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue)
        res = await cli("whisper", call.call_id, "Offer Tuesday.")
        assert res.exit_code == 1 and "not live yet" in res.output
        await call.attach("agent-cli")
        await wait_state(call, lambda s: s.status == "live", what="live")
        res = await cli("whisper", call.call_id, "Offer Tuesday.", "--by", "ann", "--json")
        assert res.exit_code == 0, res.output
        assert json.loads(res.output) | {"at": 0} == {
            "call_id": call.call_id,
            "id": 1,
            "action": "whisper",
            "text": "Offer Tuesday.",
            "node": None,
            "by": "ann",
            "at": 0,
            "takeover": False,
        }
        res = await cli("takeover", f"call-{call.call_id}", "--by", "ann")
        assert res.exit_code == 0 and "takeover 2 recorded" in res.output, res.output
        res = await cli("show", call.call_id, "--json")
        assert json.loads(res.output)["status"] == "takeover"
        res = await cli("handback", call.call_id, "--node", "nowhere")
        assert res.exit_code == 1 and "handback refused: the flow has no node 'nowhere'" in res.output
        res = await cli("handback", call.call_id, "--node", "booked", "--json")  # an end node will do
        assert res.exit_code == 0 and json.loads(res.output)["node"] == "booked", res.output
        res = await cli("handback", call.call_id)
        assert res.exit_code == 1 and "nothing to hand back" in res.output
        res = await cli("whisper", call.call_id, "x" * 2001)
        assert res.exit_code == 2 and "at most 2000 characters" in res.output
        await call.hangup()
