"""LiveKit's webhooks, verified and relayed to the call's workflow as ``room_event`` signals.

Why: LiveKit knows the moment an agent's process dies (its participant leaves the room) or
the caller hangs up; heartbeats notice the first only after ``agent_timeout_s`` of silence.
``ringflow webhooks --port N`` serves this alone; :func:`add_routes` mounts it on any aiohttp
application (a worker's, for one). Point LiveKit's ``webhook.urls`` at ``.../livekit/webhook``.

Every request is checked as ``livekit.api.WebhookReceiver`` checks it: the ``Authorization``
header is a JWT signed with the API secret whose ``sha256`` claim is the body's hash; anything
else is a 401 and reaches no workflow. A room maps to its call through the room's metadata
(``{"call_id": ...}``, set when Ringflow creates the room) or, for inbound calls, its name
(``agents.livekit_api.call_id_for_room``: the id the agent started the call under).

Answers: 200 when handled or deliberately ignored (an event Ringflow does not use, a room
that is no call, a call that has ended); 503 when Temporal could not be reached, so that
LiveKit sends it again (duplicates are harmless: the workflow applies each event id once).
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from aiohttp import web
from livekit.api import TokenVerifier, WebhookReceiver
from livekit.protocol import models as proto_models
from livekit.protocol import webhook as proto_webhook
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from ringflow.agents.http_guard import GuardedRunner, serve_guarded
from ringflow.agents.lease import AgentLease
from ringflow.agents.livekit_api import call_id_for_room
from ringflow.agents.webhook_metrics import RECEIVED, SECONDS, metrics
from ringflow.contract.room import RoomEvent
from ringflow.workflows.client import CallHandle

log = logging.getLogger(__name__)
WEBHOOK_PATH = "/livekit/webhook"
_CALL_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
MAX_BODY = 256 * 1024


def call_ids_of(room: proto_models.Room) -> list[str]:
    """The calls a room may belong to, the likeliest first; none for a room that is not a
    call's own (a warm transfer's consult room: what happens there is the transfer's
    business). A room with no call id in its metadata is an inbound call's (its id is the
    digest of the room's name) or one a call was started in by name (its id the name)."""
    try:
        meta = json.loads(room.metadata) if room.metadata else None
    except json.JSONDecodeError:
        meta = None
    if isinstance(meta, dict) and meta.get("consult"):
        return []
    call_id = meta.get("call_id") if isinstance(meta, dict) else None
    if isinstance(call_id, str):
        return [call_id] if _CALL_ID.match(call_id) else []
    if not room.name:
        return []
    return [call_id_for_room(room.name)] + ([room.name] if _CALL_ID.match(room.name) else [])


def call_id_of(room: proto_models.Room) -> str | None:
    """The likeliest call of a room (:func:`call_ids_of`), or None."""
    ids = call_ids_of(room)
    return ids[0] if ids else None


def room_event_of(ev: proto_webhook.WebhookEvent) -> tuple[list[str], RoomEvent] | None:
    """The calls it may be about (:func:`call_ids_of`) and what happened, or None for an
    event Ringflow has no use for."""
    call_ids = call_ids_of(ev.room)
    if not call_ids or not ev.id:
        return None
    at = float(ev.created_at) if ev.created_at else None
    if ev.event == "room_finished":
        return call_ids, RoomEvent(event_id=ev.id[:128], kind="room_finished", at=at)
    if ev.event != "participant_left":
        return None
    p = ev.participant
    reason = (
        proto_models.DisconnectReason.Name(p.disconnect_reason)
        if p.disconnect_reason in proto_models.DisconnectReason.values()
        else None
    )
    if p.kind == proto_models.ParticipantInfo.AGENT:
        kind = "agent_left"
    elif p.kind == proto_models.ParticipantInfo.SIP:
        kind = "caller_left"
    else:
        return None
    return call_ids, RoomEvent(
        event_id=ev.id[:128], kind=kind, identity=p.identity[:256] or None, reason=reason, at=at
    )


class WebhookRelay:
    """The handler; ``lease`` (the agents' Redis lease) is released for an agent that left,
    so its replacement attaches at once instead of waiting out the dead agent's lease."""

    def __init__(
        self, client: Client, api_key: str, api_secret: str, *, lease: AgentLease | None = None
    ) -> None:
        self.client = client
        self.receiver = WebhookReceiver(TokenVerifier(api_key, api_secret))
        self.lease = lease

    async def handle(self, request: web.Request) -> web.Response:
        with SECONDS.time():
            outcome, response = await self._handle(request)
        RECEIVED.labels(outcome).inc()
        return response

    async def _handle(self, request: web.Request) -> tuple[str, web.Response]:
        if (request.content_length or 0) > MAX_BODY:
            return "too_large", web.Response(status=413, text="webhook body too large")
        try:
            raw = await request.read()  # bounded by the application's client_max_size too
        except web.HTTPRequestEntityTooLarge:
            return "too_large", web.Response(status=413, text="webhook body too large")
        if len(raw) > MAX_BODY:
            return "too_large", web.Response(status=413, text="webhook body too large")
        try:
            ev = self.receiver.receive(
                raw.decode("utf-8", errors="replace"), request.headers.get("Authorization", "")
            )
        except Exception:  # any failure to verify is the same answer: not LiveKit's (or not ours)
            return "unverified", web.Response(status=401, text="webhook signature could not be verified")
        mapped = room_event_of(ev)
        if mapped is None:
            return "ignored", web.Response(text="ignored")
        call_ids, room_event = mapped
        if self.lease is not None and room_event.kind == "agent_left" and room_event.identity:
            for call_id in call_ids:  # before the signal: the replacement must find it free
                await self.lease.release(call_id, room_event.identity)
        for call_id in call_ids:
            try:
                await CallHandle(self.client, call_id).room_event(room_event)
            except RPCError as exc:
                if exc.status == RPCStatusCode.NOT_FOUND:  # no such call, or it has ended
                    continue
                log.warning("webhook %s for call %s not delivered: %s", ev.event, call_id, exc.status)
                return "temporal_unavailable", web.Response(
                    status=503, text="Temporal unavailable; send it again"
                )
            return "relayed", web.Response(text="ok")
        return "no_call", web.Response(text="no running call")


def add_routes(app: web.Application, relay: WebhookRelay, path: str = WEBHOOK_PATH) -> None:
    app.router.add_post(path, relay.handle)


async def serve(relay: WebhookRelay, host: str, port: int) -> GuardedRunner:
    """Start the receiver on ``host:port``, safe from slow clients (``agents/http_guard.py``:
    read deadlines, a connection cap); the caller keeps the runner and cleans it up."""
    app = web.Application(client_max_size=MAX_BODY + 1)
    add_routes(app, relay)
    app.router.add_get("/metrics", metrics)
    return await serve_guarded(app, host, port)


def bound_port(runner: GuardedRunner | web.AppRunner) -> int:
    addresses: list[Any] = list(runner.addresses)
    return int(addresses[0][1])
