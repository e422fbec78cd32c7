"""``ringflow worker`` with ``RINGFLOW_LIVEKIT_WEBHOOK_PORT``: the receiver runs in a child
process of its own by default (``ringflow webhooks``), so what its public port's clients
exhaust is not the worker's; it still answers LiveKit's signed webhooks."""

from __future__ import annotations

import contextlib

import aiohttp
import pytest
from google.protobuf import json_format
from livekit.protocol import models as proto_models
from livekit.protocol import webhook as proto_webhook

from ringflow.agents.webhooks import WEBHOOK_PATH
from ringflow.devstack import DevStack, free_port
from ringflow.servers.webhook_relay import start_relay_process
from ringflow.simulation.livekit_fake_webhooks import sign_webhook
from tests.support.wfkit import wait_until


async def test_the_receiver_runs_in_its_own_process(
    temporal_server: DevStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, secret = "APIproc", "p" * 32
    monkeypatch.setenv("LIVEKIT_API_KEY", key)
    monkeypatch.setenv("LIVEKIT_API_SECRET", secret)
    monkeypatch.setenv("RINGFLOW_TEMPORAL_ADDRESS", temporal_server.address)
    monkeypatch.setenv("RINGFLOW_ENCRYPTION", "0")
    port = free_port()
    relay = await start_relay_process("127.0.0.1", port)
    body = json_format.MessageToJson(
        proto_webhook.WebhookEvent(event="room_started", id="EV_p", room=proto_models.Room(name="lobby"))
    )
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:

            async def post() -> tuple[int, str] | None:
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with http.post(
                        f"http://127.0.0.1:{port}{WEBHOOK_PATH}",
                        data=body,
                        headers={"Authorization": sign_webhook(body, key, secret)},
                    ) as resp:
                        return resp.status, await resp.text()
                return None

            assert await wait_until(post, timeout=60, what="the receiver's answer") == (200, "ignored")
        assert relay.proc.returncode is None and relay.proc.pid
    finally:
        await relay.cleanup()
    assert relay.proc.returncode is not None
