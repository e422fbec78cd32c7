"""``ringflow call listen``: a supervisor's token joins the live call's room hidden and
subscribe-only, against a real Temporal dev server and the LiveKit protocol fake (which
checks the token and gives the participant the permissions its grants say)."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from livekit.api import ListParticipantsRequest, LiveKitAPI
from temporalio.client import Client
from typer.testing import CliRunner, Result

from ringflow.cli import app
from ringflow.simulation.livekit_fake import FakeLiveKit
from ringflow.simulation.livekit_fake_types import TwirpError
from tests.support.wfkit import running_worker, start, wait_state


async def test_a_listen_token_joins_the_calls_room_hidden_and_cannot_publish(
    monkeypatch: pytest.MonkeyPatch,
    temporal_server: object,
    temporal_client: Client,
    task_queue: str,
    sqlite_url: str,
    lk: FakeLiveKit,
) -> None:
    for k, v in {
        "RINGFLOW_TEMPORAL_ADDRESS": temporal_server.address,  # type: ignore[attr-defined]
        "RINGFLOW_TASK_QUEUE": task_queue,
        "LIVEKIT_URL": lk.url,
        "LIVEKIT_API_KEY": lk.api_key,
        "LIVEKIT_API_SECRET": lk.api_secret,
    }.items():
        monkeypatch.setenv(k, v)
    runner = CliRunner()

    async def cli(*args: str) -> Result:
        res = await asyncio.to_thread(runner.invoke, app, ["call", *args])
        assert "Traceback" not in res.output, res.output
        return res

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
