"""A supervisor's listen-in token: a LiveKit access token that joins a call's room hidden
and subscribe-only.

Hidden (``hidden``): the caller's and the bot's clients are never told a participant
joined, so the caller does not know and the bot's session, which reacts to participants,
carries on without a gap. Subscribe-only (no publish, no data, no metadata): the
supervisor hears both sides and cannot be heard; speaking to the caller is a takeover.
"""

from __future__ import annotations

from datetime import timedelta

from livekit import api

MAX_LISTEN_TTL_S = 4 * 3600


def check_ttl(ttl_s: float) -> None:
    """Raises ``ValueError`` saying the limit when a listen token may not last ``ttl_s``
    (checked before anything is asked of Temporal)."""
    if not 0 < ttl_s <= MAX_LISTEN_TTL_S:
        raise ValueError(f"a listen token lasts at most {MAX_LISTEN_TTL_S // 3600} hours, got {ttl_s:g} s")


def listen_token(api_key: str, api_secret: str, room: str, identity: str, ttl_s: float = 3600) -> str:
    """The JWT for ``identity`` to listen to ``room`` for ``ttl_s`` seconds."""
    check_ttl(ttl_s)
    grants = api.VideoGrants(
        room_join=True,
        room=room,
        hidden=True,
        can_subscribe=True,
        can_publish=False,
        can_publish_data=False,
        can_update_own_metadata=False,
    )
    return (
        api.AccessToken(api_key, api_secret)
        .with_identity(identity)
        .with_name(f"supervisor {identity}")
        .with_kind("standard")
        .with_grants(grants)
        .with_ttl(timedelta(seconds=ttl_s))
        .to_jwt()
    )
