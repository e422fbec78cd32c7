"""A receiver built on the ``standardwebhooks`` package, as docs/operating.md tells
operators to build one, accepts Ringflow's deliveries and refuses replays of them."""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import httpx
import pytest_asyncio
from aiohttp import web
from standardwebhooks.webhooks import Webhook, WebhookVerificationError
from temporalio.testing import ActivityEnvironment

from ringflow.activities.webhook import DELIVERY_HEADER, TIMESTAMP_HEADER, WebhookDelivery, WebhookSender
from ringflow.contract.records import CallRecord
from tests.support.loopback import serve_app

SECRET = "whsec_" + base64.b64encode(os.urandom(24)).decode()


@dataclass
class Receiver:
    """Verifies with standardwebhooks (signature over id.timestamp.body, 5-minute tolerance)
    and refuses an id it has already processed, as the specification asks receivers to."""

    verifier: Webhook
    url: str = ""
    seen: set[str] = field(default_factory=set)
    accepted: list[dict[str, object]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        try:
            payload = self.verifier.verify(body, dict(request.headers))
        except WebhookVerificationError as err:
            self.refused.append(str(err))
            return web.json_response({"error": str(err)}, status=400)
        msg_id = request.headers["webhook-id"]
        if msg_id in self.seen:
            self.refused.append("replayed id")
            return web.json_response({"error": "replayed"}, status=409)
        self.seen.add(msg_id)
        self.accepted.append(payload)
        return web.Response(status=204)


@pytest_asyncio.fixture
async def receiver() -> AsyncIterator[Receiver]:
    """This module's own receiver (an operator's, verifying), not the shared scripted one."""
    rec = Receiver(Webhook(SECRET))
    app = web.Application()
    app.router.add_post("/hook", rec.handle)
    async with serve_app(app) as url:
        rec.url = f"{url}/hook"
        yield rec


def record() -> CallRecord:
    now = datetime.now(UTC)
    return CallRecord(
        call_id=f"call-{uuid.uuid4().hex[:8]}",
        workflow_id="call/x",
        flow="demo",
        status="ended",
        disposition="booked",
        started_at=now - timedelta(minutes=3),
        ended_at=now,
        updated_at=now,
    )


async def deliver(sender: WebhookSender, sent_at: datetime) -> tuple[bytes, dict[str, str]]:
    delivery = WebhookDelivery(record=record(), run_id="run-1", sent_at=sent_at)
    await ActivityEnvironment().run(sender.post_call_webhook, delivery)
    return sender.build_request(delivery)


async def post(url: str, body: bytes, headers: dict[str, str]) -> int:
    async with httpx.AsyncClient() as client:
        return (await client.post(url, content=body, headers=headers)).status_code


async def test_a_captured_delivery_replayed_is_refused(receiver: Receiver) -> None:
    sender = WebhookSender(receiver.url, SECRET)
    body, headers = await deliver(sender, datetime.now(UTC))
    assert len(receiver.accepted) == 1 and receiver.refused == []
    async with httpx.AsyncClient() as client:
        # as captured: the id was processed already
        again = await client.post(receiver.url, content=body, headers=headers)
        assert again.status_code == 409
        # with a fresh timestamp (and a new id) so it looks new: the signature no longer matches
        fresh = {
            **headers,
            TIMESTAMP_HEADER: str(int(datetime.now(UTC).timestamp()) + 5),
            DELIVERY_HEADER: str(uuid.uuid4()),
        }
        forged = await client.post(receiver.url, content=body, headers=fresh)
        assert forged.status_code == 400
    assert receiver.refused == ["replayed id", "No matching signature found"]
    assert len(receiver.accepted) == 1


async def test_a_delivery_captured_long_ago_is_refused_as_stale(receiver: Receiver) -> None:
    sender = WebhookSender(receiver.url, SECRET)
    then = datetime.now(UTC) - timedelta(minutes=10)
    stale = WebhookDelivery(record=record(), run_id="run-1", sent_at=then)
    body, headers = sender.build_request(stale)  # signed then; replayed now, with an id never seen
    assert await post(receiver.url, body, headers) == 400
    assert receiver.accepted == [] and receiver.refused == ["Message timestamp too old"]


async def test_a_plain_secret_is_the_key_as_utf8_bytes(receiver: Receiver) -> None:
    receiver.verifier = Webhook(b"plain-operator-secret")
    await deliver(WebhookSender(receiver.url, "plain-operator-secret"), datetime.now(UTC))
    assert len(receiver.accepted) == 1
