"""A protocol-level fake of a LiveKit server, standing in for one at its network boundary.

No LiveKit server can run in the test environment, so tests talk to this one instead: an
aiohttp server on 127.0.0.1 that speaks the same wire protocol as the real server's
server-API, and is driven by the real ``livekit-api`` SDK (no mocks of the SDK itself). What
it reproduces, taken from the SDK (``livekit/api/twirp_client.py``, ``_service.py``,
``access_token.py``) and the server (``pkg/service/auth.go``, ``roomservice.go``,
``agent_dispatch_service.go``):

* **Transport**: Twirp. ``POST /twirp/livekit.<Service>/<Method>``. The SDK sends
  ``Content-Type: application/protobuf`` with a serialized protobuf body and decodes a
  protobuf reply, so requests are decoded with the ``livekit.protocol`` message classes.
  Twirp's JSON encoding (``application/json``) is accepted too, as a real Twirp server
  does. Errors are Twirp error JSON ``{"code": ..., "msg": ...}`` with the matching HTTP
  status, which the SDK turns into ``livekit.api.ServerError``.
* **Auth**: ``Authorization: Bearer <JWT>`` signed HS256 with the API secret, the API key
  in ``iss``. The signature, ``exp`` (required) and ``nbf`` are verified; an unknown key,
  a bad signature or an expired token is a 401 ``unauthenticated``. Grants are then
  checked per method the way the server does: ``roomCreate`` for CreateRoom/DeleteRoom,
  ``roomList`` for ListRooms, and ``roomAdmin`` *for that very room* (``video.room`` must
  equal the request's room) for participants and agent dispatch; a missing grant is a
  401 ``unauthenticated`` "permissions denied", as the server's ``twirpAuthError`` does.
  The real server writes token rejections from its auth middleware, outside Twirp; pass
  ``auth_errors_as_text=True`` to get a plain-text 401 body like that, so client code can
  be shown not to depend on the error JSON.
* **Semantics**: DeleteRoom / RemoveParticipant / DeleteDispatch of something that does
  not exist is a 404 ``not_found``. CreateDispatch into a room that does not exist either
  creates the room (``auto_create_rooms=True``, the server's auto-create behaviour) or is
  refused with 404 (``False``); real servers differ here by version and configuration,
  which is why callers that must not resurrect a finished call check the room first.

A participant joining with a token, publishing tracks and data (refused as its grants say)
lives in ``ringflow/simulation/livekit_fake_signal.py``; SIP (dialing, transfers, inbound
trunks, dispatch rules) and signed webhooks in
``ringflow/simulation/livekit_fake_sip.py``, Egress (recording into a real store) in
``ringflow/simulation/livekit_fake_egress.py``; room and participant changes made through the API or the
test controls below emit the webhooks the server would.

Not modelled: media (a track is published, no audio flows), region failover
(``/settings/regions``: the SDK only fails over for LiveKit Cloud hosts, never for
127.0.0.1), dispatch jobs actually starting an agent (tests add participants themselves
with :meth:`FakeLiveKit.add_participant`).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

import jwt
from aiohttp import web
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from livekit.protocol import agent_dispatch as proto_dispatch
from livekit.protocol import models as proto_models
from livekit.protocol import room as proto_room

from ringflow.simulation.livekit_fake_egress import EgressFake
from ringflow.simulation.livekit_fake_signal import SignalFake
from ringflow.simulation.livekit_fake_sip import SipFake
from ringflow.simulation.livekit_fake_types import (
    JSON,
    PROTOBUF,
    STATUS_CODE,
    TWIRP_PREFIX,
    TWIRP_STATUS,
    FakeDispatch,
    FakeRoom,
    LoggedRequest,
    TwirpError,
    _denied,
)

__all__ = [
    "JSON",
    "PROTOBUF",
    "STATUS_CODE",
    "TWIRP_PREFIX",
    "TWIRP_STATUS",
    "FakeDispatch",
    "FakeLiveKit",
    "FakeRoom",
    "LoggedRequest",
    "TwirpError",
]

Handler = Callable[[Any, dict[str, Any]], Awaitable[Message]]


class FakeLiveKit(SignalFake, SipFake, EgressFake):
    """``async with FakeLiveKit() as lk:`` then point the SDK at ``lk.url`` with
    ``lk.api_key`` / ``lk.api_secret``. State is plain attributes for assertions:
    ``rooms``, ``dispatches``, ``deleted_rooms``, ``requests`` (and the SIP ones)."""

    def __init__(
        self,
        *,
        api_key: str = "APIfake",
        api_secret: str | None = None,
        auto_create_rooms: bool = True,
        auth_errors_as_text: bool = False,
        webhook_url: str | None = None,
    ) -> None:
        self.api_key = api_key
        self.api_secret = api_secret or secrets.token_urlsafe(32)
        self.auto_create_rooms = auto_create_rooms
        self.auth_errors_as_text = auth_errors_as_text
        self.rooms: dict[str, FakeRoom] = {}
        self.dispatches: dict[str, FakeDispatch] = {}
        self.deleted_rooms: list[str] = []
        self.requests: list[LoggedRequest] = []
        self.delivered: list[tuple[str, str, proto_models.DataPacket]] = []  # data packets that went
        self._faults: list[tuple[str | None, int, str, str]] = []
        self._lost_replies: list[str | None] = []
        # method -> (set when a request to it was carried out and its reply waits, the gate)
        self._held: dict[str, tuple[asyncio.Event, asyncio.Event]] = {}
        self.dispatched: asyncio.Queue[FakeDispatch] = asyncio.Queue()  # each CreateDispatch, as it lands
        self._init_sip(webhook_url)
        self._init_egress()
        self._runner: web.AppRunner | None = None
        self._port = 0
        self._routes: dict[str, tuple[type[Message], Handler]] = {
            "RoomService/CreateRoom": (proto_room.CreateRoomRequest, self._create_room),
            "RoomService/ListRooms": (proto_room.ListRoomsRequest, self._list_rooms),
            "RoomService/DeleteRoom": (proto_room.DeleteRoomRequest, self._delete_room),
            "RoomService/ListParticipants": (proto_room.ListParticipantsRequest, self._list_participants),
            "RoomService/GetParticipant": (proto_room.RoomParticipantIdentity, self._get_participant),
            "RoomService/RemoveParticipant": (proto_room.RoomParticipantIdentity, self._remove_participant),
            "AgentDispatchService/CreateDispatch": (
                proto_dispatch.CreateAgentDispatchRequest,
                self._create_dispatch,
            ),
            "AgentDispatchService/ListDispatch": (
                proto_dispatch.ListAgentDispatchRequest,
                self._list_dispatch,
            ),
            "AgentDispatchService/DeleteDispatch": (
                proto_dispatch.DeleteAgentDispatchRequest,
                self._delete_dispatch,
            ),
            **self._sip_routes(),
            **self._egress_routes(),
        }

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> FakeLiveKit:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self._port = int(self._runner.addresses[0][1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stop_egress_uploads()
        await self._stop_sip()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    # -- test controls ---------------------------------------------------------------------

    def fail_next(
        self,
        n: int = 1,
        status: int = 503,
        *,
        method: str | None = None,
        code: str | None = None,
        msg: str = "injected failure",
    ) -> None:
        """The next ``n`` requests (to ``method`` only, e.g. "CreateDispatch", if given) fail
        with ``status`` before auth or handling, as an overloaded node or a proxy in front of
        the server would answer. The Twirp code defaults to the one for that status."""
        self._faults.extend([(method, status, code or STATUS_CODE.get(status, "unknown"), msg)] * n)

    def lose_next_reply(self, n: int = 1, *, method: str | None = None) -> None:
        """The next ``n`` requests (to ``method`` only, if given) are carried out, then answered
        with a 504 as if the reply had been lost on the way back: a client that retries must
        find out what already happened instead of doing it again."""
        self._lost_replies.extend([method] * n)

    def hold_replies(self, method: str) -> tuple[asyncio.Event, asyncio.Event]:
        """Requests to ``method`` ("StartRoomCompositeEgress") are carried out and their reply
        then waits until the returned gate is set; the first event is set once one waits.
        A test kills the client meanwhile: what it asked for was done, it never heard so."""
        pair = (asyncio.Event(), asyncio.Event())
        self._held[method] = pair
        return pair

    async def _hold_reply(self, method: str) -> None:
        pair = self._held.get(method.rsplit("/", 1)[-1])
        if pair is not None:
            pair[0].set()
            await pair[1].wait()

    def _take_lost_reply(self, method: str) -> bool:
        for i, only in enumerate(self._lost_replies):
            if only is None or method == only or method.endswith("/" + only):
                del self._lost_replies[i]
                return True
        return False

    def _take_fault(self, method: str) -> tuple[int, str, str] | None:
        for i, (only, status, code, msg) in enumerate(self._faults):
            if only is None or method == only or method.endswith("/" + only):
                del self._faults[i]
                return status, code, msg
        return None

    def add_room(self, name: str, *, metadata: str = "", participants: tuple[str, ...] = ()) -> FakeRoom:
        """A running room, e.g. the one a SIP caller is in; ``participants`` are identities."""
        room = self.rooms.get(name)
        if room is None:
            room = self.rooms[name] = FakeRoom(name=name, sid=f"RM_{secrets.token_hex(6)}", metadata=metadata)
            self._emit("room_started", room.to_proto())
        for identity in participants:
            self.add_participant(name, identity)
        return room

    def add_participant(
        self,
        room: str,
        identity: str,
        kind: int = proto_models.ParticipantInfo.STANDARD,
        attributes: dict[str, str] | None = None,
    ) -> proto_models.ParticipantInfo:
        """``identity`` joins ``room`` (created if need be), as a caller or an agent would."""
        info = proto_models.ParticipantInfo(
            sid=f"PA_{secrets.token_hex(6)}",
            identity=identity,
            kind=kind,  # type: ignore[arg-type]
            state=proto_models.ParticipantInfo.State.ACTIVE,
            joined_at=int(time.time()),
            attributes=attributes or {},
        )
        found = self.add_room(room)
        found.participants[identity] = info
        self._emit("participant_joined", found.to_proto(), info)
        return info

    def remove_participant(
        self, room: str, identity: str, reason: int = proto_models.CLIENT_INITIATED
    ) -> bool:
        """``identity`` leaves ``room`` (``reason``: a ``DisconnectReason``; an agent process
        killed is ``SIGNAL_CLOSE``); False if it was not there."""
        found = self.rooms.get(room)
        info = found.participants.pop(identity, None) if found else None
        if found is None or info is None:
            return False
        left = proto_models.ParticipantInfo()
        left.CopyFrom(info)
        left.state = proto_models.ParticipantInfo.State.DISCONNECTED
        left.disconnect_reason = reason  # type: ignore[assignment]
        self._emit("participant_left", found.to_proto(), left)
        return True

    def finish_room(self, name: str) -> None:
        """The room closes (deleted, or emptied out): everyone in it is disconnected."""
        for identity in list(self.rooms[name].participants):
            self.remove_participant(name, identity, proto_models.ROOM_DELETED)
        self._end_room_egresses(name)
        room = self.rooms.pop(name)
        self.deleted_rooms.append(name)
        self._emit("room_finished", room.to_proto())

    def _twirp_error(self, code: str, msg: str, meta: dict[str, str] | None = None) -> Exception:
        return TwirpError(code, msg, meta=meta)

    def calls(self, method: str) -> list[LoggedRequest]:
        """Logged requests to ``method`` ("CreateDispatch" or "AgentDispatchService/CreateDispatch")."""
        return [r for r in self.requests if r.method == method or r.method.endswith("/" + method)]

    def token(
        self,
        grants: dict[str, Any] | None = None,
        *,
        secret: str | None = None,
        ttl: float = 600.0,
        **claims: Any,
    ) -> str:
        """A hand-made token for raw-HTTP tests (expired ones, missing grants, ...)."""
        now = int(time.time())
        body: dict[str, Any] = {"iss": self.api_key, "sub": "", "nbf": now, "exp": now + int(ttl)}
        if grants is not None:
            body["video"] = grants
        body.update(claims)  # a claim given as None is left out, e.g. exp=None
        return jwt.encode(
            {k: v for k, v in body.items() if v is not None}, secret or self.api_secret, algorithm="HS256"
        )

    # -- HTTP ------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        method = path[len(TWIRP_PREFIX) :] if path.startswith(TWIRP_PREFIX) else path
        content_type = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        entry: dict[str, Any] = {
            "method": method,
            "content_type": content_type,
            "request_id": request.headers.get("X-Livekit-Request-Id"),
            "user_agent": request.headers.get("User-Agent"),
        }
        try:
            fault = self._take_fault(method)
            if fault is not None:
                status, code, msg = fault
                raise TwirpError(code, msg, status=status)
            claims = self._authenticate(request.headers.get("Authorization", ""))
            entry["api_key"] = claims.get("iss") if claims else None
            route = self._routes.get(method) if path.startswith(TWIRP_PREFIX) else None
            if route is None or request.method != "POST":
                raise TwirpError("bad_route", f"no handler for {request.method} {path}")
            if content_type not in (PROTOBUF, JSON):
                raise TwirpError("bad_route", f"unexpected Content-Type: {content_type!r}")
            message_cls, handler = route
            raw = await request.read()
            try:
                body = (
                    message_cls.FromString(raw)
                    if content_type == PROTOBUF
                    else json_format.Parse(raw or b"{}", message_cls())
                )
            except (DecodeError, json_format.ParseError) as err:
                raise TwirpError("malformed", f"the request body could not be decoded: {err}") from None
            entry["body"] = body
            reply = await handler(body, claims or {})
            await self._hold_reply(method)
            if self._take_lost_reply(method):
                raise TwirpError("deadline_exceeded", "the reply was lost (injected)")
        except TwirpError as err:
            self.requests.append(
                LoggedRequest(status=err.status, error_code=err.code, body=entry.pop("body", None), **entry)
            )
            if err.auth and self.auth_errors_as_text:
                return web.Response(status=err.status, text=err.msg, content_type="text/plain")
            error: dict[str, Any] = {"code": err.code, "msg": err.msg}
            if err.meta:
                error["meta"] = err.meta
            return web.json_response(error, status=err.status)
        self.requests.append(LoggedRequest(status=200, body=entry.pop("body"), **entry))
        if content_type == JSON:
            return web.Response(body=json_format.MessageToJson(reply).encode(), content_type=JSON)
        return web.Response(body=reply.SerializeToString(), content_type=PROTOBUF)

    def _authenticate(self, header: str) -> dict[str, Any] | None:
        """The server's auth middleware: no header means no grants (the method then denies);
        a header that is there must hold a valid token signed by a known key."""
        if not header:
            return None
        if not header.startswith("Bearer "):
            raise TwirpError(
                "unauthenticated", "invalid authorization header. Must start with Bearer ", auth=True
            )
        token = header[len("Bearer ") :]
        try:
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            raise TwirpError("unauthenticated", "invalid authorization token", auth=True) from None
        key = unverified.get("iss")
        if key != self.api_key:
            raise TwirpError("unauthenticated", f"invalid API key: {key}", auth=True)
        try:
            return dict(
                jwt.decode(
                    token,
                    self.api_secret,
                    algorithms=["HS256"],
                    issuer=self.api_key,
                    options={"require": ["exp", "iss"]},
                )
            )
        except jwt.PyJWTError as err:
            raise TwirpError("unauthenticated", f"invalid token: {err}", auth=True) from None

    # -- grants ----------------------------------------------------------------------------

    @staticmethod
    def _video(claims: dict[str, Any]) -> dict[str, Any]:
        video = claims.get("video")
        return video if isinstance(video, dict) else {}

    def _ensure_admin(self, claims: dict[str, Any], room: str) -> None:
        video = self._video(claims)
        if not video.get("roomAdmin") or video.get("room", "") != room:
            raise _denied()

    def _ensure(self, claims: dict[str, Any], grant: str) -> None:
        if not self._video(claims).get(grant):
            raise _denied()

    # -- RoomService -----------------------------------------------------------------------

    async def _create_room(self, req: proto_room.CreateRoomRequest, claims: dict[str, Any]) -> Message:
        self._ensure(claims, "roomCreate")
        if not req.name:
            raise TwirpError("invalid_argument", "room name is required")
        return self.add_room(req.name, metadata=req.metadata).to_proto()

    async def _list_rooms(self, req: proto_room.ListRoomsRequest, claims: dict[str, Any]) -> Message:
        self._ensure(claims, "roomList")
        names = set(req.names)
        rooms = [r.to_proto() for r in self.rooms.values() if not names or r.name in names]
        return proto_room.ListRoomsResponse(rooms=rooms)

    async def _delete_room(self, req: proto_room.DeleteRoomRequest, claims: dict[str, Any]) -> Message:
        self._ensure(claims, "roomCreate")
        if req.room not in self.rooms:
            raise TwirpError("not_found", "room not found")
        self.finish_room(req.room)
        # The room's dispatches end with it, as its participants (the SIP caller) are disconnected.
        for dispatch_id in [d.id for d in self.dispatches.values() if d.room == req.room]:
            del self.dispatches[dispatch_id]
        return proto_room.DeleteRoomResponse()

    async def _list_participants(
        self, req: proto_room.ListParticipantsRequest, claims: dict[str, Any]
    ) -> Message:
        self._ensure_admin(claims, req.room)
        room = self.rooms.get(req.room)
        if room is None:
            raise TwirpError("not_found", "requested room does not exist")
        return proto_room.ListParticipantsResponse(participants=list(room.participants.values()))

    async def _remove_participant(
        self, req: proto_room.RoomParticipantIdentity, claims: dict[str, Any]
    ) -> Message:
        self._ensure_admin(claims, req.room)
        room = self.rooms.get(req.room)
        if room is None or req.identity not in room.participants:
            raise TwirpError("not_found", "participant not found")
        self.remove_participant(req.room, req.identity, proto_models.PARTICIPANT_REMOVED)
        return proto_room.RemoveParticipantResponse()

    async def _get_participant(
        self, req: proto_room.RoomParticipantIdentity, claims: dict[str, Any]
    ) -> Message:
        self._ensure_admin(claims, req.room)
        room = self.rooms.get(req.room)
        if room is None or req.identity not in room.participants:
            raise TwirpError("not_found", "participant not found")
        return room.participants[req.identity]

    # -- AgentDispatchService --------------------------------------------------------------

    async def _create_dispatch(
        self, req: proto_dispatch.CreateAgentDispatchRequest, claims: dict[str, Any]
    ) -> Message:
        self._ensure_admin(claims, req.room)
        if not req.room:
            raise TwirpError("invalid_argument", "room is required")
        if req.room not in self.rooms:
            if not self.auto_create_rooms:
                raise TwirpError("not_found", "requested room does not exist")
            self.add_room(req.room)
        dispatch = FakeDispatch(
            id=f"AD_{secrets.token_hex(6)}",
            agent_name=req.agent_name,
            room=req.room,
            metadata=req.metadata,
            created_at=time.time(),
        )
        self.dispatches[dispatch.id] = dispatch
        self.dispatched.put_nowait(dispatch)
        return dispatch.to_proto()

    async def _list_dispatch(
        self, req: proto_dispatch.ListAgentDispatchRequest, claims: dict[str, Any]
    ) -> Message:
        self._ensure_admin(claims, req.room)
        found = [
            d.to_proto()
            for d in self.dispatches.values()
            if d.room == req.room and (not req.dispatch_id or d.id == req.dispatch_id)
        ]
        return proto_dispatch.ListAgentDispatchResponse(agent_dispatches=found)

    async def _delete_dispatch(
        self, req: proto_dispatch.DeleteAgentDispatchRequest, claims: dict[str, Any]
    ) -> Message:
        self._ensure_admin(claims, req.room)
        dispatch = self.dispatches.get(req.dispatch_id)
        if dispatch is None or dispatch.room != req.room:
            raise TwirpError("not_found", "dispatch not found")
        del self.dispatches[req.dispatch_id]
        return dispatch.to_proto()
