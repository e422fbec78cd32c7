"""Outbound dialing end to end: a real CallWorkflow on a real Temporal server orders the dial
activities, which reach the LiveKit fake (ringflow/livekit_fake.py) through the real livekit-api
SDK. What is checked is what LiveKit receives (room, dispatch, then CreateSIPParticipant, in
that order, never twice) and how each answer ends or starts the call."""

from __future__ import annotations

import json

import pytest
from livekit.protocol import models as proto_models
from temporalio.client import Client

from ringflow.agents.livekit_sip import LiveKitTelephony
from ringflow.contract.dial import Dial, sip_identity
from ringflow.simulation.livekit_fake import FakeLiveKit
from ringflow.workflows.client import CallHandle
from tests.support.wfkit import running_worker, start, use_services, wait_state

TO = "+15550100"


@pytest.fixture
def lk(lk: FakeLiveKit, monkeypatch: pytest.MonkeyPatch) -> FakeLiveKit:
    """The shared fake, with the dial activities' telephony pointed at it."""
    phone = LiveKitTelephony(
        lk.url,
        lk.api_key,
        lk.api_secret,
        agent_name="ringflow-test",
        trunk_id="ST_default",
        from_number="+15550111",
    )
    use_services(monkeypatch, telephony=phone)
    return lk


async def dial_call(client: Client, task_queue: str, **dial: object) -> CallHandle:
    return await start(client, task_queue, dial=Dial(to=TO, **dial))  # type: ignore[arg-type]


def transcript_system(record_or_turns: list[dict[str, object]]) -> list[str]:
    return [str(t["text"]) for t in record_or_turns if t["role"] == "system"]


async def test_an_answered_call_creates_room_then_dispatch_then_dials_and_goes_live(
    lk: FakeLiveKit, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await dial_call(temporal_client, task_queue, trunk_id="ST_call", ringing_timeout_s=20)
        await wait_state(call, lambda s: s.status == "live", what="live after the answer")
        order = [r.method.split("/")[1] for r in lk.requests if r.status == 200]
        assert order[:3] == ["CreateRoom", "ListDispatch", "CreateDispatch"]
        assert order[3:5] == ["GetParticipant", "CreateSIPParticipant"] or "CreateSIPParticipant" in order
        room = lk.rooms[call.call_id]
        assert json.loads(room.metadata) == {"call_id": call.call_id}
        (dispatch,) = lk.dispatches.values()
        assert dispatch.agent_name == "ringflow-test"
        assert dispatch.metadata_json() == {
            "call_id": call.call_id,
            "resume": False,
            "wait_for": sip_identity(call.call_id),
        }
        (sent,) = lk.dials
        assert (sent.sip_trunk_id, sent.sip_call_to, sent.sip_number) == ("ST_call", TO, "+15550111")
        assert sent.room_name == call.call_id and sent.participant_identity == sip_identity(call.call_id)
        assert sent.wait_until_answered and sent.ringing_timeout.seconds == 20
        await call.hangup("user_hangup")
        record = await call.handle.result()
    assert record.end_reason == "user_hangup"
    assert transcript_system(record.transcript) == ["dial: answered (SIP 200 OK)"]


@pytest.mark.parametrize(
    ("answer", "reason", "sip"),
    [
        ("busy", "busy", "SIP 486 Busy Here"),
        ("busy_everywhere", "busy", "SIP 600"),
        ("no_answer", "no_answer", "SIP 408"),
        ("unavailable", "no_answer", "SIP 480"),
        ("failed", "dial_failed", "SIP 503 Service Unavailable"),
        ("declined", "dial_failed", "SIP 603"),
    ],
)
async def test_an_unanswered_call_ends_with_the_dial_outcome_and_closes_the_room(
    lk: FakeLiveKit,
    temporal_client: Client,
    task_queue: str,
    sqlite_url: str,
    answer: str,
    reason: str,
    sip: str,
) -> None:
    lk.set_answer(TO, answer)
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await dial_call(temporal_client, task_queue)
        record = await call.handle.result()
    assert record.end_reason == reason and record.disposition == reason
    (note,) = transcript_system(record.transcript)
    assert note.startswith(f"dial: {reason} ({sip}")
    assert len(lk.dials) == 1
    assert call.call_id in lk.deleted_rooms  # the agent waiting in the room is let go


async def test_a_retried_dial_whose_reply_was_lost_does_not_ring_twice(
    lk: FakeLiveKit, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    lk.lose_next_reply(method="CreateSIPParticipant")  # dialed and answered; the reply is a 504
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await dial_call(temporal_client, task_queue)
        await wait_state(call, lambda s: s.status == "live", what="live after the retried dial")
        await call.hangup("user_hangup")
        record = await call.handle.result()
    assert len(lk.dials) == 1
    assert transcript_system(record.transcript) == [
        "dial: answered (SIP 200 OK) [followed an earlier attempt's dial]"
    ]


async def test_a_dial_refused_before_it_was_sent_is_retried_and_rings_once(
    lk: FakeLiveKit, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    lk.fail_next(2, 503, method="CreateSIPParticipant")  # an overloaded node, no SIP status
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await dial_call(temporal_client, task_queue)
        await wait_state(call, lambda s: s.status == "live", timeout=30, what="live after retries")
        await call.hangup("user_hangup")
        await call.handle.result()
    assert len(lk.dials) == 1 and len(lk.calls("CreateSIPParticipant")) == 3


async def test_an_agent_attaching_while_the_phone_rings_does_not_make_the_call_live(
    lk: FakeLiveKit, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    lk.ring_s = 3.0
    lk.set_answer(TO, "no_answer")
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await dial_call(temporal_client, task_queue)
        await wait_state(call, lambda s: bool(lk.dials), what="the dial sent")
        await call.attach("agent-early")
        assert (await call.state()).status == "dialing"
        record = await call.handle.result()
    assert record.end_reason == "no_answer"


async def test_a_dial_without_a_trunk_fails_saying_so(
    lk: FakeLiveKit,
    temporal_client: Client,
    task_queue: str,
    sqlite_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    phone = LiveKitTelephony(lk.url, lk.api_key, lk.api_secret)
    use_services(monkeypatch, telephony=phone)
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await dial_call(temporal_client, task_queue)
        record = await call.handle.result()
    assert record.end_reason == "dial_failed"
    assert "RINGFLOW_SIP_TRUNK_ID" in transcript_system(record.transcript)[0]
    assert lk.dials == []


def test_call_dial_refuses_bad_input_before_reaching_temporal(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from ringflow.cli import app
    from tests.support.wfkit import FIXTURES

    monkeypatch.setenv("RINGFLOW_TEMPORAL_ADDRESS", "127.0.0.1:9")  # nothing there: never reached
    monkeypatch.delenv("RINGFLOW_SIP_TRUNK_ID", raising=False)
    flow = str(FIXTURES / "clinic.yaml")
    runner = CliRunner()
    bad_number = runner.invoke(app, ["call", "dial", flow, "--to", "555 0100; rm", "--trunk", "ST_1"])
    assert bad_number.exit_code == 2 and "--to:" in bad_number.output
    letters = runner.invoke(app, ["call", "dial", flow, "--to", "+1212555CALL", "--trunk", "ST_1"])
    assert letters.exit_code == 2 and "has letters" in letters.output  # never dialed as +12125552255
    no_trunk = runner.invoke(app, ["call", "dial", flow, "--to", TO])
    assert no_trunk.exit_code == 2 and "RINGFLOW_SIP_TRUNK_ID" in no_trunk.output
    bad_ring = runner.invoke(
        app, ["call", "dial", flow, "--to", TO, "--trunk", "ST_1", "--ringing-timeout", "0"]
    )
    assert bad_ring.exit_code == 2 and "--ringing-timeout" in bad_ring.output
    assert "Traceback" not in bad_number.output + no_trunk.output + bad_ring.output


async def test_a_transfer_whose_reply_was_lost_is_not_made_twice(
    lk: FakeLiveKit, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    from ringflow.callflow.loader import load_flow
    from tests.support.wfkit import Agent, req

    ivr = load_flow("examples/flows/ivr_menu/flow.yaml")
    lk.lose_next_reply(method="TransferSIPParticipant")  # REFER done, the answer lost: a retry
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue, ivr, variables={}, call_id="xfer-1", room="xfer-1")
        lk.add_participant("xfer-1", "sip-caller", proto_models.ParticipantInfo.SIP)
        await call.attach("agent-1")
        await Agent(call).transition("menu", "to_billing")
        out = await call.call_function(req("billing", "billing_desk"))
        record = await call.handle.result()
    assert out.decision == "end" and out.result["status"] == "transferred"
    assert record.end_reason == "transferred" and record.path == ["menu", "billing"]
    assert [t.transfer_to for t in lk.transfers] == ["tel:+15550198"]  # once, despite the retry
    assert lk.sip_participants("xfer-1") == []


async def at_handoff(
    lk: FakeLiveKit, client: Client, task_queue: str, call_id: str, **fields: object
) -> CallHandle:
    """An IVR call (room named after it, its caller on the line) at the warm transfer's node."""
    from ringflow.callflow.loader import load_flow
    from tests.support.wfkit import Agent

    flow = load_flow("examples/flows/ivr_menu/flow.yaml")
    call = await start(client, task_queue, flow, variables={}, call_id=call_id, room=call_id, **fields)
    lk.add_participant(call_id, "sip-caller", proto_models.ParticipantInfo.SIP)
    await call.attach("agent-1")
    await Agent(call).transition("menu", "to_person")
    return call


async def announcer(lk: FakeLiveKit, announced: list[str]) -> None:
    """LiveKit starting a warm transfer's announcer job: it joins and marks its briefing done."""
    while True:
        job = await lk.dispatched.get()
        if "announce" in job.metadata_json():
            announced.append(job.metadata_json()["announce"])
            lk.add_participant(
                job.room, "announcer", proto_models.ParticipantInfo.AGENT, {"ringflow.announced": "done"}
            )


async def test_a_warm_transfer_dials_announces_and_moves_the_person_once(
    lk: FakeLiveKit, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """The person is dialed into the consult room, an announcer job is dispatched there (played
    here as LiveKit would start it), then the person is moved to the caller. The move's reply
    is lost: the retry finds the person with the caller and neither dials nor moves again."""
    import asyncio
    import contextlib

    from tests.support.wfkit import req

    announced: list[str] = []
    jobs = asyncio.ensure_future(announcer(lk, announced))
    lk.lose_next_reply(method="MoveParticipant")
    try:
        async with running_worker(temporal_client, task_queue, sqlite_url):
            call = await at_handoff(lk, temporal_client, task_queue, "warm-1", caller_number="+15550142")
            out = await call.call_function(req("handoff", "connect_person"))
            record = await call.handle.result()
    finally:
        jobs.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await jobs
    assert out.decision == "end" and out.result["status"] == "transferred" and out.result["mode"] == "warm"
    assert record.end_reason == "transferred"
    assert [(d.room_name, d.sip_call_to) for d in lk.dials] == [("warm-1-consult", "+15550199")]
    assert len(lk.moves) == 1 and lk.moves[0].destination_room == "warm-1"
    assert len(announced) == 1 and "calling from +15550142" in announced[0]
    assert {p.identity for p in lk.rooms["warm-1"].participants.values()} == {"sip-caller", "transfer-warm-1"}
    assert "warm-1-consult" in lk.deleted_rooms


async def test_a_warm_transfer_on_a_server_that_cannot_move_falls_back_and_hangs_the_person_up(
    lk: FakeLiveKit, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """LiveKit's open-source server answers MoveParticipant "not implemented" (HTTP 500): not
    retried as transient; the person is hung up and the caller goes to the entry's fallback."""
    import asyncio
    import contextlib

    from tests.support.wfkit import req

    jobs = asyncio.ensure_future(announcer(lk, []))
    lk.fail_next(3, 500, method="MoveParticipant", msg="not implemented")
    try:
        async with running_worker(temporal_client, task_queue, sqlite_url):
            call = await at_handoff(lk, temporal_client, task_queue, "warm-oss")
            out = await call.call_function(req("handoff", "connect_person"))
            await call.hangup()
            await call.handle.result()
    finally:
        jobs.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await jobs
    assert out.result["status"] == "failed" and "LiveKit Cloud" in out.result["detail"]
    assert out.node == "desk_busy"  # the entry's fallback
    assert len(lk.dials) == 1 and "warm-oss-consult" in lk.deleted_rooms
    assert [p.identity for p in lk.rooms["warm-oss"].participants.values()] == ["sip-caller"]
