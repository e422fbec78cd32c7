"""A supervisor's LiveKit tokens for a call's room: to listen in (hidden, subscribe-only),
and to speak to the caller during a takeover (a microphone, nothing else).

Listening (``hidden``): the caller's and the bot's clients are never told a participant
joined, so the caller does not know and the bot's session, which reacts to participants,
carries on without a gap. Subscribe-only (no publish, no data, no metadata): the
supervisor hears both sides and cannot be heard; speaking to the caller is a takeover.

Taking over: the token may publish a microphone track only (``canPublishSources``:
microphone; no camera, no screen, no data, no metadata of its own), subscribes, and marks
the participant ``ringflow.role=supervisor`` (an attribute the token sets, which the
supervisor cannot change). It is **not hidden**: LiveKit tells no other participant about a
hidden one (the server's ``broadcastParticipantState`` stops there), so nobody learns of
its tracks: the SIP bridge would never subscribe to the supervisor's microphone (the caller
would hear nothing) and the agent could not find it to transcribe it
(``agents/supervisor_voice.py``). The caller's phone shows nothing either way: only the
audio reaches it.
"""

from __future__ import annotations

from datetime import timedelta

from livekit import api

MAX_LISTEN_TTL_S = 4 * 3600
ROLE_ATTRIBUTE = "ringflow.role"  # the participant attribute a takeover's token sets
SUPERVISOR_ROLE = "supervisor"


def check_ttl(ttl_s: float) -> None:
    """Raises ``ValueError`` saying the limit when a supervisor's token may not last ``ttl_s``
    (checked before anything is asked of Temporal)."""
    if not 0 < ttl_s <= MAX_LISTEN_TTL_S:
        raise ValueError(
            f"a supervisor's token lasts at most {MAX_LISTEN_TTL_S // 3600} hours, got {ttl_s:g} s"
        )


def listen_token(api_key: str, api_secret: str, room: str, identity: str, ttl_s: float = 3600) -> str:
    """The JWT for ``identity`` to listen to ``room`` for ``ttl_s`` seconds."""
    grants = api.VideoGrants(
        room_join=True,
        room=room,
        hidden=True,
        can_subscribe=True,
        can_publish=False,
        can_publish_data=False,
        can_update_own_metadata=False,
    )
    return _token(api_key, api_secret, identity, grants, ttl_s, {})


def takeover_token(api_key: str, api_secret: str, room: str, identity: str, ttl_s: float = 3600) -> str:
    """The JWT for ``identity`` to speak to the caller in ``room`` (and hear both sides)."""
    grants = api.VideoGrants(
        room_join=True,
        room=room,
        hidden=False,
        can_subscribe=True,
        can_publish=True,
        can_publish_sources=["microphone"],
        can_publish_data=False,
        can_update_own_metadata=False,
    )
    return _token(api_key, api_secret, identity, grants, ttl_s, {ROLE_ATTRIBUTE: SUPERVISOR_ROLE})


def _token(
    api_key: str,
    api_secret: str,
    identity: str,
    grants: api.VideoGrants,
    ttl_s: float,
    attributes: dict[str, str],
) -> str:
    check_ttl(ttl_s)
    token = (
        api.AccessToken(api_key, api_secret)
        .with_identity(identity)
        .with_name(f"supervisor {identity}")
        .with_kind("standard")
        .with_grants(grants)
        .with_ttl(timedelta(seconds=ttl_s))
    )
    if attributes:
        token = token.with_attributes(attributes)
    return token.to_jwt()


def is_supervisor(participant: object) -> bool:
    """A participant that joined with a takeover's token (its attributes say so)."""
    attributes = getattr(participant, "attributes", None) or {}
    return bool(attributes.get(ROLE_ATTRIBUTE) == SUPERVISOR_ROLE)
