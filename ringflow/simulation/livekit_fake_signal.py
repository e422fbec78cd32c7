"""The LiveKit fake's client side (``ringflow/simulation/livekit_fake.py``): a participant
joining with a token, then publishing tracks and data, refused as the server refuses them.

Split from the fake's core; :class:`FakeLiveKit` mixes this in. No media flows (no WebRTC):
what is modelled is what the server decides from the token, taken from the server
(``pkg/rtc/participant.go``, ``pkg/auth/grants.go``) and the protocol (``livekit_rtc.proto``):

* **Join** (the signal connection's authentication): a valid token granting ``roomJoin``
  for an existing room; the participant gets the token's identity, name, kind and
  attributes, and the permissions its grants give (``hidden``, ``canPublish``,
  ``canPublishSources``...).
* **Publishing a track** (signal ``AddTrackRequest``): allowed when the grants allow its
  source: ``canPublish``, and, when ``canPublishSources`` lists any, that source among them
  (``GetCanPublishSource``). Allowed, the server answers ``TrackPublishedResponse`` and the
  track is in the participant's info (ListParticipants shows it); refused, a
  ``RequestResponse`` ``NOT_ALLOWED`` and nothing is published.
* **Data** (a ``DataPacket`` on the data channel): the server drops it, silently, from a
  participant without ``canPublishData``; :meth:`SignalFake.send_data` says whether it went.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from livekit.protocol import models as proto_models
from livekit.protocol import rtc as proto_rtc

from ringflow.simulation.livekit_fake_types import TwirpError, _denied

# the grant's names of the sources (lower-case TrackSource names, as the server compares them)
SOURCES = {
    "camera": proto_models.TrackSource.CAMERA,
    "microphone": proto_models.TrackSource.MICROPHONE,
    "screen_share": proto_models.TrackSource.SCREEN_SHARE,
    "screen_share_audio": proto_models.TrackSource.SCREEN_SHARE_AUDIO,
}
KINDS = {
    "standard": proto_models.ParticipantInfo.STANDARD,
    "ingress": proto_models.ParticipantInfo.INGRESS,
    "egress": proto_models.ParticipantInfo.EGRESS,
    "sip": proto_models.ParticipantInfo.SIP,
    "agent": proto_models.ParticipantInfo.AGENT,
}


class SignalFake:
    """Joining, publishing and data; a mixin of ``FakeLiveKit`` (uses its rooms and auth)."""

    rooms: dict[str, Any]
    delivered: list[tuple[str, str, proto_models.DataPacket]]

    # FakeLiveKit's own: its auth middleware, the token's video grant, a participant joining
    _authenticate: Callable[[str], dict[str, Any] | None]
    _video: Callable[[dict[str, Any]], dict[str, Any]]
    add_participant: Callable[..., proto_models.ParticipantInfo]

    def join(self, token: str) -> proto_models.ParticipantInfo:
        """A client connecting to the room with ``token``: the token must be valid, grant
        ``roomJoin`` for an existing room, and the participant gets the permissions its
        grants give. Raises :class:`TwirpError` (``unauthenticated`` / ``not_found``) as the
        server refuses the connection."""
        claims = self._authenticate(f"Bearer {token}") or {}
        video = self._video(claims)
        room = str(video.get("room", ""))
        if not video.get("roomJoin") or not room:
            raise _denied()
        if room not in self.rooms:
            raise TwirpError("not_found", "requested room does not exist")
        attributes = claims.get("attributes")
        info = self.add_participant(
            room,
            str(claims.get("sub", "")),
            KINDS.get(str(claims.get("kind") or "standard"), proto_models.ParticipantInfo.STANDARD),
            {str(k): str(v) for k, v in attributes.items()} if isinstance(attributes, dict) else None,
        )
        info.name = str(claims.get("name", ""))
        sources = [SOURCES[s] for s in video.get("canPublishSources") or [] if s in SOURCES]
        info.permission.CopyFrom(
            proto_models.ParticipantPermission(
                can_subscribe=bool(video.get("canSubscribe", True)),
                can_publish=bool(video.get("canPublish", True)),
                can_publish_data=bool(video.get("canPublishData", True)),
                can_publish_sources=sources,
                can_update_metadata=bool(video.get("canUpdateOwnMetadata", False)),
                hidden=bool(video.get("hidden", False)),
            )
        )
        return info

    def _joined(self, room: str, identity: str) -> proto_models.ParticipantInfo:
        found = self.rooms.get(room)
        info = found.participants.get(identity) if found is not None else None
        if info is None:
            raise TwirpError("not_found", f"participant {identity} is not in room {room}")
        return info

    def signal(self, room: str, identity: str, request: proto_rtc.SignalRequest) -> proto_rtc.SignalResponse:
        """A request on ``identity``'s signal connection; ``add_track`` is modelled (see the
        module), anything else is answered ``UNSUPPORTED_TYPE``."""
        info = self._joined(room, identity)
        if request.WhichOneof("message") != "add_track":
            return _refused(proto_rtc.RequestResponse.UNSUPPORTED_TYPE, "not modelled by the fake")
        add = request.add_track
        if not may_publish(info.permission, add.source):
            refused = _refused(proto_rtc.RequestResponse.NOT_ALLOWED, "does not have permission to publish")
            refused.request_response.add_track.CopyFrom(add)
            return refused
        track = proto_models.TrackInfo(
            sid=f"TR_{secrets.token_hex(6)}", type=add.type, name=add.name, source=add.source, muted=add.muted
        )
        info.tracks.append(track)
        return proto_rtc.SignalResponse(
            track_published=proto_rtc.TrackPublishedResponse(cid=add.cid, track=track)
        )

    def send_data(self, room: str, identity: str, packet: proto_models.DataPacket) -> bool:
        """A data packet from ``identity``: delivered (kept in ``delivered``) or, without
        ``canPublishData``, dropped as the server drops it (False)."""
        info = self._joined(room, identity)
        if not info.permission.can_publish_data:
            return False
        self.delivered.append((room, identity, packet))
        return True


def may_publish(permission: proto_models.ParticipantPermission, source: int) -> bool:
    """The server's ``GetCanPublishSource``: publishing at all, then the source among those
    listed (none listed: any source)."""
    if not permission.can_publish:
        return False
    return not permission.can_publish_sources or source in permission.can_publish_sources


def _refused(reason: int, message: str) -> proto_rtc.SignalResponse:
    return proto_rtc.SignalResponse(
        request_response=proto_rtc.RequestResponse(reason=reason, message=message)  # type: ignore[arg-type]
    )
