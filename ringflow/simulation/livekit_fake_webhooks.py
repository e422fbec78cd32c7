"""Signed webhooks of the LiveKit fake (``ringflow/simulation/livekit_fake.py``): room and participant
events POSTed as the server does, ``Content-Type: application/webhook+json``, the event as
protobuf JSON, and ``Authorization: <JWT>`` signed with the API secret whose ``sha256`` claim
is the base64 SHA-256 of the body (what ``livekit.api.WebhookReceiver`` checks). Events are
sent in order by one task; :meth:`WebhookFake.post_webhook` sends any event (duplicates,
reordered, forged) for tests.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import secrets
import time
from dataclasses import dataclass

import aiohttp
import jwt
from google.protobuf import json_format
from livekit.protocol import models as proto_models
from livekit.protocol import webhook as proto_webhook

WEBHOOK_CONTENT_TYPE = "application/webhook+json"


@dataclass(frozen=True)
class SentWebhook:
    event: proto_webhook.WebhookEvent
    status: int | None  # the receiver's HTTP status; None if it could not be reached


def sign_webhook(body: str, api_key: str, api_secret: str, *, ttl_s: int = 600) -> str:
    """The ``Authorization`` value LiveKit sends with a webhook: a JWT over the body's hash."""
    now = int(time.time())
    digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
    return jwt.encode(
        {"iss": api_key, "nbf": now, "exp": now + ttl_s, "sub": "", "sha256": digest},
        api_secret,
        algorithm="HS256",
    )


class WebhookFake:
    """The webhook side of ``FakeLiveKit`` (a mixin)."""

    api_key: str
    api_secret: str

    def _init_webhooks(self, webhook_url: str | None) -> None:
        self.webhook_url = webhook_url
        self.webhooks: list[SentWebhook] = []
        self._webhook_queue: asyncio.Queue[proto_webhook.WebhookEvent] | None = None
        self._webhook_task: asyncio.Task[None] | None = None

    def _emit(
        self,
        event: str,
        room: proto_models.Room | None = None,
        participant: proto_models.ParticipantInfo | None = None,
    ) -> None:
        """Queue an event for the webhook URL, in order (a no-op without one)."""
        if not self.webhook_url:
            return
        ev = proto_webhook.WebhookEvent(
            event=event, id=f"EV_{secrets.token_hex(8)}", created_at=int(time.time())
        )
        if room is not None:
            ev.room.CopyFrom(room)
        if participant is not None:
            ev.participant.CopyFrom(participant)
        if self._webhook_queue is None:
            self._webhook_queue = asyncio.Queue()
            self._webhook_task = asyncio.get_running_loop().create_task(self._send_webhooks())
        self._webhook_queue.put_nowait(ev)

    async def _send_webhooks(self) -> None:
        assert self._webhook_queue is not None
        while True:
            ev = await self._webhook_queue.get()
            try:
                await self.post_webhook(ev)
            finally:
                self._webhook_queue.task_done()

    async def post_webhook(
        self, event: proto_webhook.WebhookEvent, *, secret: str | None = None, body: str | None = None
    ) -> int | None:
        """POST one signed event to the webhook URL now; returns the receiver's status."""
        assert self.webhook_url, "no webhook_url"
        text = body if body is not None else json_format.MessageToJson(event)
        token = sign_webhook(text, self.api_key, secret or self.api_secret)
        status: int | None = None
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
                http.post(
                    self.webhook_url,
                    data=text.encode(),
                    headers={"Authorization": token, "Content-Type": WEBHOOK_CONTENT_TYPE},
                ) as resp,
            ):
                status = resp.status
        self.webhooks.append(SentWebhook(event, status))
        return status

    async def webhooks_sent(self) -> None:
        """Wait until every queued webhook has been posted."""
        if self._webhook_queue is not None:
            await self._webhook_queue.join()

    async def _stop_webhooks(self) -> None:
        if self._webhook_task is not None:
            self._webhook_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._webhook_task
