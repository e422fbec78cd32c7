"""LiveKit webhooks reach the call's workflow: a lost agent is replaced at once, a caller
leaving ends the call. The LiveKit fake (ringflow/livekit_fake.py) posts webhooks signed as the
server signs them to the real receiver (agents/webhooks.py), which signals a real
CallWorkflow on a real Temporal server; the replacement dispatch goes back to the fake
through the real LiveKitDispatcher. The agent timeout is a minute, so only the webhook can
have caused a replacement within the test's wait."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from livekit.protocol import models as proto_models
from temporalio.client import Client

from ringflow.agents.livekit_api import LiveKitDispatcher
from ringflow.agents.webhooks import WEBHOOK_PATH, WebhookRelay, bound_port, serve
from ringflow.simulation.livekit_fake import FakeLiveKit
from ringflow.workflows.client import CallHandle
from tests.support.wfkit import running_worker, start, use_services, wait_state, wait_until

AGENT = proto_models.ParticipantInfo.AGENT
SIP = proto_models.ParticipantInfo.SIP


@pytest_asyncio.fixture
async def lk(
    lk: FakeLiveKit, monkeypatch: pytest.MonkeyPatch, temporal_client: Client
) -> AsyncIterator[FakeLiveKit]:
    """The shared fake, posting its webhooks to a relay into the workflows, and the
    dispatcher pointed at it."""
    runner = await serve(WebhookRelay(temporal_client, lk.api_key, lk.api_secret), "127.0.0.1", 0)
    lk.webhook_url = f"http://127.0.0.1:{bound_port(runner)}{WEBHOOK_PATH}"
    use_services(
        monkeypatch,
        dispatcher=LiveKitDispatcher(lk.url, lk.api_key, lk.api_secret, agent_name="ringflow-test"),
    )
    try:
        yield lk
    finally:
        await runner.cleanup()


async def live_call(client: Client, task_queue: str, lk: FakeLiveKit, call_id: str) -> CallHandle:
    call = await start(client, task_queue, call_id=call_id, room=call_id, agent_timeout_s=60.0)
    await call.attach("agent-1")
    lk.add_participant(call_id, "agent-1", AGENT)
    lk.add_participant(call_id, "sip-caller", SIP)
    await wait_state(call, lambda s: s.status == "live")
    return call


def resume_dispatches(lk: FakeLiveKit) -> list[dict[str, object]]:
    return [d.metadata_json() for d in lk.dispatches.values() if d.metadata_json().get("resume")]


async def test_a_killed_agent_is_replaced_at_once_and_late_or_forged_webhooks_change_nothing(
    lk: FakeLiveKit, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await live_call(temporal_client, task_queue, lk, "wh-call-1")
        lk.remove_participant("wh-call-1", "agent-1", proto_models.SIGNAL_CLOSE)  # the process died

        async def dispatched() -> list[dict[str, object]]:
            return resume_dispatches(lk)

        assert await wait_until(dispatched, timeout=60, what="a replacement dispatched") == [
            {"call_id": "wh-call-1", "resume": True}
        ]
        st = await call.state()
        assert any("agent-1 left the room (SIGNAL_CLOSE)" in r.reason for r in st.rejected)
        await call.attach("agent-2")
        left = next(w.event for w in lk.webhooks if w.event.event == "participant_left")
        assert await lk.post_webhook(left) == 200  # LiveKit retrying it: applied once
        forged = type(left)()
        forged.CopyFrom(left)
        forged.id, forged.participant.identity = "EV_forged", "agent-2"
        assert await lk.post_webhook(forged, secret="not-the-api-secret-but-just-as-long") == 401
        await wait_state(call, lambda s: s.agent_id == "agent-2")
        assert len(resume_dispatches(lk)) == 1
        lk.remove_participant("wh-call-1", "sip-caller", proto_models.CLIENT_INITIATED)  # the caller hung up
        record = await call.handle.result()
    assert record.end_reason == "user_hangup"
    assert len(resume_dispatches(lk)) == 1


async def test_an_agent_that_hung_up_leaving_is_not_lost_and_a_finished_room_ends_the_call(
    lk: FakeLiveKit, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await live_call(temporal_client, task_queue, lk, "wh-call-2")
        lk.remove_participant("wh-call-2", "someone-else", proto_models.SIGNAL_CLOSE)  # not there: no event
        lk.add_participant("wh-call-2", "agent-0", AGENT)
        lk.remove_participant("wh-call-2", "agent-0", proto_models.SIGNAL_CLOSE)  # not the call's agent
        await lk.webhooks_sent()
        lk.finish_room("wh-call-2")
        record = await call.handle.result()
        assert record.end_reason == "user_hangup"
        assert resume_dispatches(lk) == []
        # the call is over: LiveKit's late webhooks about it are accepted and ignored
        late = next(w.event for w in lk.webhooks if w.event.event == "room_finished")
        late.id = "EV_late"
        assert await lk.post_webhook(late) == 200


async def test_the_receiver_refuses_what_livekit_did_not_sign(temporal_client: Client) -> None:
    import aiohttp

    async with FakeLiveKit() as fake:
        runner = await serve(WebhookRelay(temporal_client, fake.api_key, fake.api_secret), "127.0.0.1", 0)
        url = f"http://127.0.0.1:{bound_port(runner)}{WEBHOOK_PATH}"
        metrics = f"http://127.0.0.1:{bound_port(runner)}/metrics"

        async def counted(http: aiohttp.ClientSession) -> dict[str, float]:
            async with http.get(metrics) as resp:
                text = await resp.text()
            found = re.findall(r'^ringflow_webhooks_received_total\{outcome="(\w+)"\} (\S+)$', text, re.M)
            return {outcome: float(value) for outcome, value in found}

        try:
            async with aiohttp.ClientSession() as http:
                before = await counted(http)
                for headers, body in [
                    ({}, b"{}"),
                    ({"Authorization": "not-a-jwt"}, b"{}"),
                    ({"Authorization": fake.token({})}, b'{"event": "room_finished"}'),
                    ({}, b"x" * 300_000),
                ]:
                    async with http.post(url, data=body, headers=headers) as resp:
                        assert resp.status in (401, 413), (headers, resp.status)
                        assert "Traceback" not in await resp.text()
                after = await counted(http)  # the receiver's /metrics counts what it refused
                assert after["unverified"] - before["unverified"] == 3
                assert after["too_large"] - before["too_large"] == 1
                assert after["relayed"] == before["relayed"]
        finally:
            await runner.cleanup()


async def test_turns_still_lingering_in_the_agent_s_outbox_when_the_caller_leaves_are_recorded(
    lk: FakeLiveKit, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """The caller's webhook ends the call while the agent's last turns wait in its outbox to
    ride with its next event (issue 13's coalescing): the workflow waits for the agent's
    hangup, which carries them, before it writes the record. A second call's agent leaves the
    room instead of hanging up: the wait ends there, without a note."""
    from ringflow.agents.outbox import Outbox
    from ringflow.agents.signals import workflow_sender
    from ringflow.contract.events import HangupEvent, Turn, TurnsEvent

    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await live_call(temporal_client, task_queue, lk, "wh-linger")
        outbox = Outbox(workflow_sender(call), linger_s=3600)  # only an urgent event sends them
        outbox.start()
        outbox.put(TurnsEvent(event_id="t1", seq=1, items=[Turn(role="assistant", text="Anything else?")]))
        outbox.put(TurnsEvent(event_id="t2", seq=2, items=[Turn(role="user", text="No, bye.")]))
        lk.remove_participant("wh-linger", "sip-caller", proto_models.CLIENT_INITIATED)
        await wait_state(call, lambda s: s.end_reason == "user_hangup")
        assert outbox.pending == 2  # still held: the call has ended without them
        outbox.put(HangupEvent(event_id="h1", reason="user_hangup"))  # the agent saw the caller go
        await outbox.close(10)
        record = await call.handle.result()

        gone = await live_call(temporal_client, task_queue, lk, "wh-agent-gone")
        lk.remove_participant("wh-agent-gone", "sip-caller", proto_models.CLIENT_INITIATED)
        await wait_state(gone, lambda s: s.end_reason == "user_hangup")
        lk.remove_participant("wh-agent-gone", "agent-1", proto_models.CLIENT_INITIATED)
        await gone.handle.result()
        gone_state = await gone.state()  # the ended call's, as it wrote its record
    assert [t["text"] for t in record.transcript] == ["Anything else?", "No, bye."]
    assert record.end_reason == "user_hangup"
    assert not any("no hangup from the agent" in r.reason for r in gone_state.rejected)
