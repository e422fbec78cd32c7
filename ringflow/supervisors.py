"""Supervisors on a live call: what ``ringflow call listen|whisper|takeover|handback``, the
HTTP API and the console share, so the three refuse the same action with the same reason.

An action is the call's workflow's ``supervise`` update (``workflows/client.py``); its
refusals come from the workflow's validator or, once the call's workflow has closed, from
Temporal: both are :class:`SupervisionRefused` with the reason as given. A listen-in is a
LiveKit token for the call's room (``agents/supervisor_listen.py``), refused once it ended; a
takeover answers, beside what the workflow recorded, the token to speak to the caller with.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ringflow.agents.supervisor_listen import check_ttl
from ringflow.calls import CallNotFound, NoWorkerAnswered
from ringflow.contract.ids import CALL_WORKFLOW_PREFIX

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from temporalio.client import Client

    from ringflow.contract.supervision import SupervisorAnswer, SupervisorRequest
    from ringflow.settings import Settings

__all__ = [
    "CallNotFound",
    "NoLiveKit",
    "NoWorkerAnswered",
    "RoomGrant",
    "SupervisionRefused",
    "check_ttl",
    "listen_grant",
    "require_livekit",
    "supervise",
    "takeover",
]


class SupervisionRefused(Exception):
    """The call cannot take the action now (not live yet, taken over already, ended, no such
    node...): the workflow's reason, or Temporal's once the call's workflow has closed."""

    def __init__(self, action: str, reason: str) -> None:
        super().__init__(f"{action} refused: {reason}")
        self.action = action
        self.reason = reason


class NoLiveKit(RuntimeError):
    """Listening needs LiveKit's URL and API credentials, and they are not set."""


async def _not_found(client: Client, call_id: str, action: str, message: str) -> Exception:
    """A NOT_FOUND from Temporal: the call never was (:class:`CallNotFound`), or its
    workflow has closed (a refusal: the call has ended)."""
    from temporalio.service import RPCError, RPCStatusCode

    from ringflow.workflows.client import CallHandle

    try:
        await CallHandle(client, call_id).handle.describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return CallNotFound(f"no call '{call_id}'")
        return exc
    return SupervisionRefused(action, f"the call has ended ({message})")


async def supervise(
    client: Client,
    call_id: str,
    req: SupervisorRequest,
    *,
    timeout_s: float = 30,
    redis_url: str | None = None,
) -> SupervisorAnswer:
    """Send the action to the call (``call-`` prefix or not) and give what it recorded; with
    ``redis_url``, wake the call's agent to apply it now (:func:`nudge_agent`).
    Raises :class:`SupervisionRefused`, :class:`CallNotFound`, :class:`NoWorkerAnswered`."""
    from temporalio.client import WorkflowUpdateFailedError
    from temporalio.service import RPCError, RPCStatusCode

    from ringflow.workflows.client import CallHandle

    call_id = call_id.removeprefix(CALL_WORKFLOW_PREFIX)
    try:
        answer = await asyncio.wait_for(CallHandle(client, call_id).supervise(req), timeout_s)
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        raise SupervisionRefused(req.action, getattr(cause, "message", None) or str(cause)) from None
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise await _not_found(client, call_id, req.action, exc.message) from None
        raise SupervisionRefused(req.action, exc.message) from None
    except TimeoutError:
        raise NoWorkerAnswered(
            f"call {call_id}: no worker answered (is `ringflow worker` running?)"
        ) from None
    await nudge_agent(call_id, redis_url)
    return answer


async def nudge_agent(call_id: str, redis_url: str | None) -> None:
    """Wake the call's agent to read the action now (``agents/supervision_nudge.py``); best
    effort: the action is recorded, and the agent's backstop read finds it without this."""
    if not redis_url:
        return
    from redis.asyncio import Redis

    from ringflow.agents.supervision_nudge import publish

    redis = Redis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=2)
    try:
        await publish(redis, call_id)
    except Exception as exc:
        log.warning(
            "call %s: the agent was not nudged (%s): it reads on its backstop", call_id, type(exc).__name__
        )
    finally:
        await redis.aclose()


@dataclass(frozen=True)
class RoomGrant:
    """What a supervisor joins the call's room with: hidden and subscribe-only to listen, a
    microphone to speak during a takeover."""

    call_id: str
    room: str
    identity: str
    url: str
    token: str
    ttl_s: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "room": self.room,
            "identity": self.identity,
            "url": self.url,
            "token": self.token,
            "ttl_s": self.ttl_s,
        }


def require_livekit(settings: Settings) -> tuple[str, str, Any]:
    """LiveKit's URL, API key and secret; :class:`NoLiveKit` naming the settings when unset."""
    key, secret, url = settings.livekit_api_key, settings.livekit_api_secret, settings.livekit_url
    if not (url and key and secret):
        raise NoLiveKit("listening needs LiveKit: set LIVEKIT_URL, LIVEKIT_API_KEY and LIVEKIT_API_SECRET")
    return url, key, secret


async def listen_grant(
    client: Client, settings: Settings, call_id: str, identity: str, ttl_s: float = 3600
) -> RoomGrant:
    """A token for ``identity`` to listen to the live call. Raises :class:`NoLiveKit`,
    ``ValueError`` (the ttl), :class:`CallNotFound`, :class:`NoWorkerAnswered`, and
    :class:`SupervisionRefused` once the call has ended."""
    from ringflow.agents.supervisor_listen import listen_token

    check_ttl(ttl_s)
    call_id = call_id.removeprefix(CALL_WORKFLOW_PREFIX)
    room = await _live_room(client, call_id, "listen", "there is nothing to listen to")
    url, key, secret = require_livekit(settings)  # after the call: an unknown one is that first
    token = listen_token(key, secret.get_secret_value(), room, identity, ttl_s)
    return RoomGrant(call_id, room, identity, url, token, ttl_s)


async def _live_room(client: Client, call_id: str, action: str, why: str) -> str:
    """The LiveKit room of the call, asked of its workflow; refused once the call ended."""
    from temporalio.service import RPCError, RPCStatusCode

    from ringflow.workflows.client import CallHandle

    try:
        view = await asyncio.wait_for(CallHandle(client, call_id).state(), 15)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise CallNotFound(f"no call '{call_id}'") from None
        raise SupervisionRefused(action, exc.message) from None
    except TimeoutError:
        raise NoWorkerAnswered(
            f"call {call_id}: no worker answered (is `ringflow worker` running?)"
        ) from None
    if view.status == "ended":
        raise SupervisionRefused(action, f"the call has ended: {why}")
    return view.room or call_id


async def takeover(
    client: Client,
    settings: Settings,
    call_id: str,
    req: SupervisorRequest,
    identity: str,
    ttl_s: float = 3600,
) -> tuple[SupervisorAnswer, RoomGrant | None]:
    """Take the call over (``req``: the takeover as the workflow records it) and, when
    LiveKit is set, a token for ``identity`` to speak to the caller (a microphone, marked
    ``ringflow.role=supervisor``: ``agents/supervisor_listen.py``); None without LiveKit
    (a simulated or text-mode call: the takeover is recorded all the same). Raises as
    :func:`supervise` does, and ``ValueError`` for the ttl before anything is sent."""
    from ringflow.agents.supervisor_listen import takeover_token

    check_ttl(ttl_s)
    call_id = call_id.removeprefix(CALL_WORKFLOW_PREFIX)
    answer = await supervise(client, call_id, req, redis_url=settings.redis_url)
    try:
        url, key, secret = require_livekit(settings)
    except NoLiveKit:
        return answer, None
    room = await _live_room(client, call_id, "takeover", "there is no one to speak to")
    token = takeover_token(key, secret.get_secret_value(), room, identity, ttl_s)
    return answer, RoomGrant(call_id, room, identity, url, token, ttl_s)
