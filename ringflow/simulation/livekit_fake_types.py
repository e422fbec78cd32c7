"""The LiveKit fake's protocol types: Twirp errors and codes, and the records it keeps
(rooms, dispatches, logged requests). Split from ``ringflow/simulation/livekit_fake.py``."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import Message
from livekit.protocol import agent_dispatch as proto_dispatch
from livekit.protocol import models as proto_models

PROTOBUF = "application/protobuf"
JSON = "application/json"
TWIRP_PREFIX = "/twirp/livekit."

# Twirp error codes and the HTTP statuses the Twirp spec maps them to.
TWIRP_STATUS = {
    "invalid_argument": 400,
    "malformed": 400,
    "unauthenticated": 401,
    "permission_denied": 403,
    "not_found": 404,
    "bad_route": 404,
    "already_exists": 409,
    "resource_exhausted": 429,
    "failed_precondition": 412,
    "internal": 500,
    "unknown": 500,
    "unimplemented": 501,
    "unavailable": 503,
    "deadline_exceeded": 504,
}
STATUS_CODE = {
    400: "invalid_argument",
    401: "unauthenticated",
    403: "permission_denied",
    404: "not_found",
    409: "already_exists",
    429: "resource_exhausted",
    500: "internal",
    501: "unimplemented",
    502: "unavailable",
    503: "unavailable",
    504: "deadline_exceeded",
}


class TwirpError(Exception):
    """An error answered as Twirp error JSON (or plain text for auth rejections, if asked)."""

    def __init__(
        self,
        code: str,
        msg: str,
        *,
        status: int | None = None,
        auth: bool = False,
        meta: dict[str, str] | None = None,
    ) -> None:
        super().__init__(msg)
        self.code = code
        self.msg = msg
        self.status = status if status is not None else TWIRP_STATUS.get(code, 500)
        self.auth = auth
        self.meta = meta


def _denied() -> TwirpError:
    return TwirpError("unauthenticated", "permissions denied")


@dataclass
class FakeRoom:
    """A room as the fake server holds it; participants are the protocol's own messages."""

    name: str
    sid: str
    metadata: str = ""
    created_at: float = field(default_factory=time.time)
    participants: dict[str, proto_models.ParticipantInfo] = field(default_factory=dict)

    def to_proto(self) -> proto_models.Room:
        return proto_models.Room(
            sid=self.sid,
            name=self.name,
            metadata=self.metadata,
            creation_time=int(self.created_at),
            creation_time_ms=int(self.created_at * 1000),
            num_participants=len(self.participants),
        )


@dataclass(frozen=True)
class FakeDispatch:
    """An explicit agent dispatch, as CreateDispatch recorded it."""

    id: str
    agent_name: str
    room: str
    metadata: str
    created_at: float

    def metadata_json(self) -> Any:
        return json.loads(self.metadata)

    def to_proto(self) -> proto_dispatch.AgentDispatch:
        return proto_dispatch.AgentDispatch(
            id=self.id,
            agent_name=self.agent_name,
            room=self.room,
            metadata=self.metadata,
            state=proto_dispatch.AgentDispatchState(created_at=int(self.created_at * 1e9)),
        )


@dataclass(frozen=True)
class LoggedRequest:
    """One HTTP request as the fake saw it, including those it refused or failed on purpose."""

    method: str  # "RoomService/DeleteRoom"
    status: int
    content_type: str
    request_id: str | None  # the SDK's X-Livekit-Request-Id idempotency key
    user_agent: str | None
    body: Message | None  # the decoded request; None when refused before decoding
    error_code: str | None = None
    api_key: str | None = None
