"""CallWorkflow: gates and actions, timers (max duration, agent liveness), attach, visibility
and persistence on both databases."""

from __future__ import annotations

import asyncio
import json
import uuid

from temporalio.client import Client
from typer.testing import CliRunner

from ringflow.activities.persistence import load_call
from ringflow.callflow.loader import load_flow
from ringflow.cli import app
from ringflow.devstack import DevStack
from tests.support.wfkit import FIXTURES, Agent, offered, running_worker, start, wait_state, wait_until


def triage():  # type: ignore[no-untyped-def]
    return load_flow(FIXTURES / "triage.yaml")


async def test_gate_and_action_nodes_route_without_llm(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue, triage(), variables={})
        await Agent(call).transition("intake", "describe", {"severity": 5})
        record = await wait_until(lambda: call.handle.result(), what="result")
    assert record.path == ["intake", "route", "lookup", "escalated"]
    assert record.state["ticket"] == {"status": "opened", "id": "T-5"}
    assert record.disposition == "escalated"


async def test_gate_default_and_capture_validation(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue, triage(), variables={})
        agent = Agent(call)
        await agent.transition("intake", "describe", {"severity": 9})  # violates maximum: 5
        st = await wait_state(call, lambda s: bool(s.rejected))
        assert "severity" in st.rejected[0].reason and st.node == "intake"
        await agent.transition("intake", "describe", {"severity": 2})
        st = await wait_state(call, lambda s: s.node == "self_help")
        assert st.path == ["intake", "route", "self_help"]
        await call.hangup()
        await call.handle.result()


async def test_max_duration_backstop_ends_the_call(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue, triage(), variables={})
        record = await wait_until(lambda: call.handle.result(), timeout=30, what="max duration end")
    assert record.end_reason == "max_duration" and record.disposition == "max_duration"


async def test_silent_agent_is_lost_after_failed_dispatches(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue, agent_timeout_s=0.5)
        await call.heartbeat("agent-a")
        st = await wait_state(call, lambda s: s.status == "live")
        assert st.agent_id == "agent-a"
        record = await wait_until(lambda: call.handle.result(), timeout=30, what="agent_lost end")
        st = await call.state()
    assert record.end_reason == "agent_lost"
    assert sum("agent_lost" in r.reason for r in st.rejected) == 3


async def test_attach_returns_a_snapshot_to_resume_from(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue)
        agent = Agent(call)
        await agent.say(("assistant", "Hello, is this Alex Doe?"), ("user", "It is."))
        await agent.transition("verify", "confirmed")
        await wait_state(call, lambda s: s.node == "offer")
        snap = await call.attach("agent-b")
        assert snap.node == "offer" and snap.next_seq == 3 and not snap.ended
        prompt, names = offered(snap)
        assert "Offer a new slot" in (prompt or "") and "Harbour Clinic" in (prompt or "")
        assert names == ["list_slots", "book", "lookup", "broken", "remember", "note", "wants_human"]
        assert [t.text for t in snap.transcript_tail] == ["Hello, is this Alex Doe?", "It is."]
        assert (await call.state()).agent_id == "agent-b"
        await call.hangup()
        await call.handle.result()


async def test_visibility_and_cli(
    temporal_server: DevStack, temporal_client: Client, task_queue: str, sqlite_url: str, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RINGFLOW_TEMPORAL_ADDRESS", temporal_server.address)
    monkeypatch.setenv("RINGFLOW_TASK_QUEUE", task_queue)
    runner = CliRunner()

    async def cli(*args: str):  # type: ignore[no-untyped-def]
        # The CLI runs its own event loop (asyncio.run), so it cannot run on this one.
        return await asyncio.to_thread(runner.invoke, app, list(args))

    async with running_worker(temporal_client, task_queue, sqlite_url):
        out = await cli(
            "call", "start", str(FIXTURES / "clinic.yaml"), "--var", "patient=Sam Roe", "--campaign", "spring"
        )
        assert out.exit_code == 0, out.output
        call_id = out.output.strip().splitlines()[-1]
        from ringflow.workflows.client import CallHandle

        call = CallHandle(temporal_client, call_id)
        await Agent(call).transition("verify", "confirmed")
        await wait_state(call, lambda s: s.node == "offer")

        async def in_list() -> list[dict[str, object]]:
            res = await cli("call", "list", "--node", "offer", "--flow", "clinic_reminder", "--json")
            assert res.exit_code == 0, res.output
            return [r for r in json.loads(res.output) if r["call_id"] == call_id]

        rows = await wait_until(in_list, what="visibility shows the call on node offer")
        assert rows[0]["status"] == "live" and rows[0]["transitions"] == 1
        shown = await cli("call", "show", call_id, "--json")
        assert shown.exit_code == 0 and json.loads(shown.output)["node"] == "offer"
        assert (await cli("call", "hangup", call_id)).exit_code == 0
        record = await call.handle.result()
        assert record.end_reason == "user_hangup"

        async def ended() -> list[dict[str, object]]:
            res = await cli("call", "list", "--status", "ended", "--json")
            return [r for r in json.loads(res.output) if r["call_id"] == call_id]

        rows = await wait_until(ended, what="visibility shows the call ended")
        assert rows[0]["end_reason"] == "user_hangup" and rows[0]["disposition"] == "user_hangup"
    missing = await cli("call", "start", str(FIXTURES / "clinic.yaml"))
    assert missing.exit_code == 1 and "patient" in missing.output
    bad = await cli("call", "start", str(FIXTURES / "clinic.yaml"), "--var", "oops")
    assert bad.exit_code == 2


async def test_record_persisted_on_both_databases(
    temporal_client: Client, task_queue: str, database_url: str
) -> None:
    async with running_worker(temporal_client, task_queue, database_url):
        call = await start(temporal_client, task_queue, call_id=f"db-{uuid.uuid4().hex[:8]}")
        agent = Agent(call)
        await agent.say(("user", "hello"))
        await agent.transition("verify", "wrong_person")
        record = await call.handle.result()
    stored = load_call(call.call_id, database_url=database_url)
    assert stored is not None
    assert stored.path == ["verify", "wrong_number"] and stored.disposition == "wrong_number"
    assert stored.status == "ended" and [t["text"] for t in stored.transcript] == ["hello"]
    assert stored.variables["patient"] == record.variables["patient"]
