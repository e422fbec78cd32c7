"""The LiveKit fake's SIP service and webhooks, driven by the real livekit-api SDK.

These pin the fake to LiveKit's protocol as the SDK sees it (SipCallError with the SIP
status, grants, trunk/dispatch-rule shapes, webhooks that ``WebhookReceiver`` accepts), so
the Ringflow tests built on it exercise what a real server would send.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web
from livekit.api import (
    CreateSIPDispatchRuleRequest,
    CreateSIPInboundTrunkRequest,
    CreateSIPParticipantRequest,
    ListSIPDispatchRuleRequest,
    ListSIPInboundTrunkRequest,
    LiveKitAPI,
    RoomParticipantIdentity,
    SipCallError,
    SIPDispatchRule,
    SIPDispatchRuleIndividual,
    SIPInboundTrunkInfo,
    TokenVerifier,
    TransferSIPParticipantRequest,
    WebhookReceiver,
)
from livekit.api import ServerError as LiveKitServerError
from livekit.protocol import models as proto_models
from livekit.protocol import webhook as proto_webhook

from ringflow.simulation.livekit_fake import FakeLiveKit


def api(lk: FakeLiveKit, secret: str | None = None) -> LiveKitAPI:
    return LiveKitAPI(lk.url, lk.api_key, secret or lk.api_secret, failover=False)


def dial(number: str, **kw: object) -> CreateSIPParticipantRequest:
    return CreateSIPParticipantRequest(
        sip_trunk_id="ST_out",
        sip_call_to=number,
        room_name="r1",
        participant_identity="sip-c1",
        wait_until_answered=True,
        **kw,
    )


async def test_an_answered_dial_puts_a_sip_participant_in_the_room(lk: FakeLiveKit) -> None:
    async with api(lk) as lkapi:
        info = await lkapi.sip.create_sip_participant(dial("+15550100"))
        got = await lkapi.room.get_participant(RoomParticipantIdentity(room="r1", identity="sip-c1"))
    assert info.participant_identity == "sip-c1" and info.room_name == "r1" and info.sip_call_id
    assert got.kind == proto_models.ParticipantInfo.SIP
    assert got.attributes["sip.phoneNumber"] == "+15550100"
    assert lk.dials[0].ringing_timeout.seconds == 30  # the SDK pins the ring window


@pytest.mark.parametrize(
    ("answer", "sip_code", "http"),
    [("busy", 486, 429), ("no_answer", 408, 504), ("failed", 503, 412), ("declined", 603, 403)],
)
async def test_a_failed_dial_is_a_sip_call_error_with_the_sip_status(
    lk: FakeLiveKit, answer: str, sip_code: int, http: int
) -> None:
    lk.set_answer("+15550100", answer)
    async with api(lk) as lkapi:
        with pytest.raises(SipCallError) as caught:
            await lkapi.sip.create_sip_participant(dial("+15550100"))
    assert caught.value.sip_status_code == sip_code
    assert caught.value.status == http
    assert lk.sip_participants("r1") == []


async def test_dialing_needs_the_sip_call_grant(lk: FakeLiveKit) -> None:
    token = lk.token({"roomAdmin": True, "room": "r1"})  # room admin, but no sip grant
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{lk.url}/twirp/livekit.SIP/CreateSIPParticipant",
            json={"sipTrunkId": "ST_out", "sipCallTo": "+1555", "roomName": "r1"},
            headers={"Authorization": f"Bearer {token}"},
        ) as resp,
    ):
        assert resp.status == 401
    async with api(lk, secret="a-wrong-secret-of-enough-length-0123456789") as lkapi:
        with pytest.raises(LiveKitServerError) as caught:
            await lkapi.sip.create_sip_participant(dial("+15550100"))
    assert caught.value.status == 401
    assert lk.dials == []


async def test_a_lost_reply_still_dialed(lk: FakeLiveKit) -> None:
    lk.lose_next_reply(method="CreateSIPParticipant")
    async with api(lk) as lkapi:
        with pytest.raises(LiveKitServerError):
            await lkapi.sip.create_sip_participant(dial("+15550100"))
    assert [p.identity for p in lk.sip_participants("r1")] == ["sip-c1"]


async def test_a_cold_transfer_removes_the_caller_and_a_refused_one_keeps_them(lk: FakeLiveKit) -> None:
    lk.set_answer("+15550199", "busy")
    async with api(lk) as lkapi:
        await lkapi.sip.create_sip_participant(dial("+15550100"))
        with pytest.raises(SipCallError):
            await lkapi.sip.transfer_sip_participant(
                TransferSIPParticipantRequest(
                    room_name="r1", participant_identity="sip-c1", transfer_to="tel:+15550199"
                )
            )
        assert len(lk.sip_participants("r1")) == 1
        await lkapi.sip.transfer_sip_participant(
            TransferSIPParticipantRequest(
                room_name="r1", participant_identity="sip-c1", transfer_to="tel:+15550142"
            )
        )
    assert lk.sip_participants("r1") == []
    assert [t.transfer_to for t in lk.transfers] == ["tel:+15550199", "tel:+15550142"]


async def test_inbound_trunks_and_dispatch_rules_are_created_listed_and_updated(lk: FakeLiveKit) -> None:
    async with api(lk) as lkapi:
        trunk = await lkapi.sip.create_inbound_trunk(
            CreateSIPInboundTrunkRequest(trunk=SIPInboundTrunkInfo(name="ringflow", numbers=["+15550100"]))
        )
        rule = await lkapi.sip.create_dispatch_rule(
            CreateSIPDispatchRuleRequest(
                rule=SIPDispatchRule(dispatch_rule_individual=SIPDispatchRuleIndividual(room_prefix="call-")),
                trunk_ids=[trunk.sip_trunk_id],
                name="ringflow",
                metadata='{"flow": "a.yaml"}',
            )
        )
        await lkapi.sip.update_dispatch_rule_fields(rule.sip_dispatch_rule_id, metadata='{"flow": "b.yaml"}')
        await lkapi.sip.update_inbound_trunk_fields(trunk.sip_trunk_id, name="renamed")
        trunks = await lkapi.sip.list_inbound_trunk(ListSIPInboundTrunkRequest(numbers=["+15550100"]))
        rules = await lkapi.sip.list_dispatch_rule(ListSIPDispatchRuleRequest(trunk_ids=[trunk.sip_trunk_id]))
        with pytest.raises(LiveKitServerError) as caught:  # one number, one trunk
            await lkapi.sip.create_inbound_trunk(
                CreateSIPInboundTrunkRequest(trunk=SIPInboundTrunkInfo(numbers=["+15550100"]))
            )
    assert caught.value.status == 409
    assert [t.name for t in trunks.items] == ["renamed"] and trunk.sip_trunk_id.startswith("ST_")
    assert [r.metadata for r in rules.items] == ['{"flow": "b.yaml"}']


async def test_webhooks_are_signed_as_livekit_signs_them() -> None:
    got: list[proto_webhook.WebhookEvent] = []
    refused: list[str] = []
    holder: dict[str, FakeLiveKit] = {}

    async def receive(request: web.Request) -> web.Response:
        lk = holder["lk"]
        receiver = WebhookReceiver(TokenVerifier(lk.api_key, lk.api_secret))
        try:
            got.append(receiver.receive((await request.read()).decode(), request.headers["Authorization"]))
        except Exception as exc:  # what the receiver refuses
            refused.append(str(exc))
            return web.Response(status=401)
        assert request.headers["Content-Type"] == "application/webhook+json"
        return web.Response()

    app = web.Application()
    app.router.add_post("/hook", receive)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with FakeLiveKit(webhook_url=f"http://127.0.0.1:{port}/hook") as lk:
            holder["lk"] = lk
            lk.add_participant("r1", "agent-1", proto_models.ParticipantInfo.AGENT)
            lk.remove_participant("r1", "agent-1", proto_models.SIGNAL_CLOSE)
            await asyncio.wait_for(lk.webhooks_sent(), 10)
            assert await lk.post_webhook(got[-1], secret="not-the-secret-but-long-enough-0123456789") == 401
    finally:
        await runner.cleanup()
    assert [e.event for e in got] == ["room_started", "participant_joined", "participant_left"]
    assert got[-1].participant.disconnect_reason == proto_models.SIGNAL_CLOSE
    assert got[-1].room.name == "r1" and got[-1].id
    assert len(refused) == 1
