"""``ringflow call listen`` and ``takeover``: a supervisor's token joins the live call's room
hidden and subscribe-only, or (taking over) visible with a microphone and nothing else,
against a real Temporal dev server and the LiveKit protocol fake (which checks the token,
gives the participant the permissions its grants say and refuses what they do not allow)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import aiohttp
import pytest
from livekit.api import ListParticipantsRequest, LiveKitAPI
from livekit.protocol.models import DataPacket, TrackSource, TrackType, UserPacket
from livekit.protocol.rtc import AddTrackRequest, RequestResponse, SignalRequest
from temporalio.client import Client
from typer.testing import CliRunner, Result

from ringflow.cli import app
from ringflow.simulation.livekit_fake import FakeLiveKit
from ringflow.simulation.livekit_fake_types import TwirpError
from tests.support.wfkit import running_worker, start, wait_state


@pytest.fixture
def cli(
    monkeypatch: pytest.MonkeyPatch, temporal_server: object, task_queue: str, lk: FakeLiveKit
) -> Callable[..., Awaitable[Result]]:
    """``ringflow call ...`` on the test's dev server and LiveKit fake (never a traceback)."""
    for k, v in {
        "RINGFLOW_TEMPORAL_ADDRESS": temporal_server.address,  # type: ignore[attr-defined]
        "RINGFLOW_TASK_QUEUE": task_queue,
        "LIVEKIT_URL": lk.url,
        "LIVEKIT_API_KEY": lk.api_key,
        "LIVEKIT_API_SECRET": lk.api_secret,
    }.items():
        monkeypatch.setenv(k, v)
    runner = CliRunner()

    async def run(*args: str) -> Result:
        res = await asyncio.to_thread(runner.invoke, app, ["call", *args])
        assert "Traceback" not in res.output, res.output
        return res

    return run


async def test_a_listen_token_joins_the_calls_room_hidden_and_cannot_publish(
    temporal_client: Client,
    task_queue: str,
    sqlite_url: str,
    lk: FakeLiveKit,
    cli: Callable[..., Awaitable[Result]],
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue, room="room-listen")
        lk.add_room("room-listen", participants=("sip-caller",))
        res = await cli("listen", call.call_id, "--identity", "sup-ann", "--json")
        assert res.exit_code == 0, res.output
        out = json.loads(res.output)
        assert (out["room"], out["identity"], out["url"]) == ("room-listen", "sup-ann", lk.url)
        joined = lk.join(out["token"])
        assert joined.identity == "sup-ann" and joined.permission.hidden
        assert joined.permission.can_subscribe and not joined.permission.can_publish
        assert not joined.permission.can_publish_data
        async with LiveKitAPI(lk.url, lk.api_key, lk.api_secret) as lkapi:
            listed = await lkapi.room.list_participants(ListParticipantsRequest(room="room-listen"))
        assert {p.identity for p in listed.participants} == {"sip-caller", "sup-ann"}
        async with (  # it may listen, not administer the room (the server API with its token)
            aiohttp.ClientSession() as http,
            http.post(
                f"{lk.url}/twirp/livekit.RoomService/ListParticipants",
                json={"room": "room-listen"},
                headers={"Authorization": f"Bearer {out['token']}"},
            ) as refused,
        ):
            assert refused.status in (401, 403)
        with pytest.raises(TwirpError):
            lk.join(out["token"][:-4] + "AAAA")  # tampered: refused
        res = await cli("listen", call.call_id, "--ttl", "999999")
        assert res.exit_code == 2 and "at most 4 hours" in res.output
        await call.hangup()
        await wait_state(call, lambda s: s.status == "ended", what="the call ended")
        res = await cli("listen", call.call_id)
        assert res.exit_code == 1 and "has ended" in res.output


def add_track(source: int, name: str) -> SignalRequest:
    return SignalRequest(add_track=AddTrackRequest(cid=name, name=name, type=TrackType.AUDIO, source=source))


async def test_a_takeover_token_speaks_to_the_caller_with_a_microphone_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch,
    temporal_client: Client,
    task_queue: str,
    sqlite_url: str,
    lk: FakeLiveKit,
    cli: Callable[..., Awaitable[Result]],
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue, room="room-take")
        lk.add_room("room-take", participants=("sip-caller",))
        res = await cli("takeover", call.call_id, "--identity", "sup-bob", "--json")
        assert res.exit_code == 1 and "not live yet" in res.output, res.output  # refused: no token
        await call.attach("agent-take")
        await wait_state(call, lambda s: s.status == "live", what="live")
        res = await cli("takeover", call.call_id, "--identity", "sup-bob", "--by", "bob", "--ttl", "999999")
        assert res.exit_code == 2 and "at most 4 hours" in res.output  # checked before it is sent
        res = await cli("takeover", call.call_id, "--identity", "sup-bob", "--by", "bob", "--json")
        assert res.exit_code == 0, res.output
        out = json.loads(res.output)
        assert (out["action"], out["by"], out["takeover"]) == ("takeover", "bob", True)
        voice = out["voice"]
        assert (voice["room"], voice["identity"], voice["url"]) == ("room-take", "sup-bob", lk.url)
        joined = lk.join(voice["token"])
        perm = joined.permission
        assert not perm.hidden  # the SIP bridge must learn of its track to route it to the caller
        assert perm.can_subscribe and perm.can_publish and not perm.can_publish_data
        assert list(perm.can_publish_sources) == [TrackSource.MICROPHONE]
        assert not perm.can_update_metadata  # its role attribute stays as the token set it
        assert dict(joined.attributes) == {"ringflow.role": "supervisor"}
        mic = lk.signal("room-take", "sup-bob", add_track(TrackSource.MICROPHONE, "mic"))
        assert mic.WhichOneof("message") == "track_published"
        for source in (TrackSource.CAMERA, TrackSource.SCREEN_SHARE, TrackSource.SCREEN_SHARE_AUDIO):
            refused = lk.signal("room-take", "sup-bob", add_track(source, "other"))
            assert refused.request_response.reason == RequestResponse.NOT_ALLOWED, source
        assert not lk.send_data("room-take", "sup-bob", DataPacket(user=UserPacket(payload=b"hi")))
        assert lk.delivered == []
        async with LiveKitAPI(lk.url, lk.api_key, lk.api_secret) as lkapi:
            listed = await lkapi.room.list_participants(ListParticipantsRequest(room="room-take"))
        sup = next(p for p in listed.participants if p.identity == "sup-bob")
        assert [(t.name, t.source) for t in sup.tracks] == [("mic", TrackSource.MICROPHONE)]
        listen = json.loads((await cli("listen", call.call_id, "--identity", "sup-eve", "--json")).output)
        lk.join(listen["token"])  # the listener may publish nothing at all
        refused = lk.signal("room-take", "sup-eve", add_track(TrackSource.MICROPHONE, "mic"))
        assert refused.request_response.reason == RequestResponse.NOT_ALLOWED
        res = await cli("handback", call.call_id)
        assert res.exit_code == 0, res.output
        monkeypatch.delenv("LIVEKIT_URL")  # no LiveKit: the takeover is recorded, with no token
        res = await cli("takeover", call.call_id, "--json")
        assert res.exit_code == 0 and json.loads(res.output)["voice"] is None, res.output
        res = await cli("takeover", call.call_id)
        assert res.exit_code == 1 and "taken over" in res.output, res.output
        await call.hangup()
