"""LiveKit's server API as Ringflow uses it: re-dispatching an agent, closing rooms, job metadata.

Why this exists: every call is a ``CallWorkflow``; when the agent serving it goes silent,
``CallWorkflow.agent_lost()`` runs the ``dispatch_agent`` activity, which (in a worker
started with ``RINGFLOW_DISPATCHER=livekit``) lands in :class:`LiveKitDispatcher`. That asks the LiveKit
server for an explicit agent dispatch into the same room, with job metadata
``{"call_id": ..., "resume": true}``, so the new agent attaches to the running workflow
instead of starting a new call. :func:`parse_job_metadata` is the agent's side of that
contract (and of inbound SIP dispatch rules, whose metadata names a ``flow``).

Error policy, chosen for what Temporal should do with each outcome:

* ``DispatchResult(dispatched=False, detail=...)`` -- final, no retry: the call has no room,
  the room no longer exists (the caller hung up: an agent would talk to nobody, and on a
  server that auto-creates rooms a dispatch would even resurrect an empty room, so the room
  is looked up first), or the server refused the request (4xx: bad credentials, missing
  grants, invalid arguments). Retrying cannot fix any of those, and the workflow counts
  the failure towards ``max_dispatch_attempts`` and ends the call ``agent_lost``.
* :class:`LiveKitUnavailable` raised -- transient: connection errors, timeouts, HTTP 5xx and
  429. The activity fails and Temporal retries it (``workflows/activity_calls.py``).

Errors are classified by HTTP status, not by the Twirp code in the body: the real server
answers token rejections from its auth middleware outside Twirp, without the error JSON.

Retries belong to Temporal, so the SDK's own region failover is off (it would replay a
request up to three times with backoff inside one activity attempt and overrun the
activity's 15 s timeout); each request has a short timeout of its own.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import aiohttp
from livekit.api import (
    CreateAgentDispatchRequest,
    DeleteRoomRequest,
    ListRoomsRequest,
    LiveKitAPI,
    ServerError,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ringflow.activities.dispatch import DispatchRequest, DispatchResult
from ringflow.contract.dial import MAX_ANNOUNCE_CHARS

DEFAULT_AGENT_NAME = "ringflow"
DEFAULT_TIMEOUT_S = 5.0


class LiveKitError(Exception):
    """A LiveKit server API call failed."""


class LiveKitUnavailable(LiveKitError):
    """Transient: the server could not be reached or answered 5xx/429. Worth retrying."""


class LiveKitRefused(LiveKitError):
    """The server refused the request (4xx other than 429). Retrying will not help."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def _credentials(url: str | None, api_key: str | None, api_secret: str | None) -> tuple[str, str, str]:
    """The entry point passes them from its settings (``LIVEKIT_*``). Fails at construction,
    naming what is missing, so a worker does not start with a dispatcher that cannot work."""
    missing = [
        name
        for name, value in (
            ("LIVEKIT_URL", url),
            ("LIVEKIT_API_KEY", api_key),
            ("LIVEKIT_API_SECRET", api_secret),
        )
        if not value
    ]
    if missing:
        raise ValueError(f"LiveKit is not configured: set {', '.join(missing)}")
    assert url and api_key and api_secret
    return url, api_key, api_secret


def _client(url: str, api_key: str, api_secret: str, timeout_s: float) -> LiveKitAPI:
    """A client per operation: dispatches and room closes are rare, and a session created on
    the running loop never outlives it (activities and tests run on different loops)."""
    return LiveKitAPI(
        url, api_key, api_secret, timeout=aiohttp.ClientTimeout(total=timeout_s), failover=False
    )


def _is_transient(err: ServerError) -> bool:
    return err.status >= 500 or err.status in (408, 429)


def _describe(err: ServerError) -> str:
    what = f"HTTP {err.status}"
    if err.code and err.code != "unknown":
        what += f" {err.code}"
    return f"{what}: {err.message}" if err.message else what


def call_id_for_room(room: str) -> str:
    """An inbound call's id, from the room LiveKit's dispatch rule made for it: a digest of
    the room's name, always. LiveKit names such a room ``<prefix>_<caller's number>_<random>``,
    and the number must not become a workflow id (Temporal shows those in every list and
    log), with its ``+`` or without (``call-_15557654321_...`` is a valid id as it stands).
    The same room always gives the same id: a second agent, and the webhook receiver, find
    the call. Rooms Ringflow makes carry their call id in their metadata instead."""
    return "in-" + hashlib.sha256(room.encode()).hexdigest()[:24]


def job_metadata(call_id: str, *, resume: bool = True) -> str:
    """The metadata a dispatched job carries; :func:`parse_job_metadata` reads it back."""
    return json.dumps({"call_id": call_id, "resume": resume})


class LiveKitDispatcher:
    """The ``Dispatcher`` of ``activities.dispatch`` backed by LiveKit explicit agent dispatch.

    The agent worker must register under the same ``agent_name`` (explicit dispatch only
    reaches workers started with one): the entry point passes ``RINGFLOW_AGENT_NAME``.
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        api_secret: str | None = None,
        *,
        agent_name: str = DEFAULT_AGENT_NAME,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.url, self.api_key, self._api_secret = _credentials(url, api_key, api_secret)
        self.agent_name = agent_name
        self.timeout_s = timeout_s

    def __repr__(self) -> str:  # never the secret
        return (
            f"LiveKitDispatcher(url={self.url!r}, api_key={self.api_key!r}, agent_name={self.agent_name!r})"
        )

    async def dispatch(self, req: DispatchRequest) -> DispatchResult:
        """Dispatch a fresh agent into the call's room; see the module docstring for which
        failures are results and which raise."""
        if not req.room:
            return DispatchResult(
                dispatched=False, detail=f"call {req.call_id} has no LiveKit room; nowhere to dispatch"
            )
        step = "ListRooms"
        try:
            async with _client(self.url, self.api_key, self._api_secret, self.timeout_s) as lk:
                listed = await lk.room.list_rooms(ListRoomsRequest(names=[req.room]))
                if not any(room.name == req.room for room in listed.rooms):
                    return DispatchResult(
                        dispatched=False,
                        detail=(
                            f"room '{req.room}' of call {req.call_id} no longer exists (the caller has left); "  # noqa: E501
                            "not dispatching an agent into it"
                        ),
                    )
                step = "CreateDispatch"
                dispatch = await lk.agent_dispatch.create_dispatch(
                    CreateAgentDispatchRequest(
                        agent_name=self.agent_name, room=req.room, metadata=job_metadata(req.call_id)
                    )
                )
        except ServerError as err:
            if _is_transient(err):
                raise LiveKitUnavailable(
                    f"LiveKit {step} for call {req.call_id} failed, will retry: {_describe(err)}"
                ) from err
            if err.status == 404:
                detail = (
                    f"room '{req.room}' of call {req.call_id} no longer exists ({step}: {_describe(err)})"
                )
            elif err.status in (401, 403):
                detail = (
                    f"LiveKit refused API key '{self.api_key}' for {step} in room '{req.room}' "
                    f"(bad credentials or missing grants; {_describe(err)})"
                )
            else:
                detail = f"LiveKit refused {step} for room '{req.room}' ({_describe(err)})"
            return DispatchResult(dispatched=False, detail=detail)
        except (TimeoutError, aiohttp.ClientError) as err:
            raise LiveKitUnavailable(
                f"LiveKit at {self.url} unreachable during {step} for call {req.call_id}, will retry: "
                f"{type(err).__name__}: {err}"
            ) from err
        return DispatchResult(
            dispatched=True,
            detail=(f"dispatched agent '{self.agent_name}' into room '{req.room}' (dispatch {dispatch.id})"),
        )


async def close_room(
    room: str,
    *,
    url: str | None = None,
    api_key: str | None = None,
    api_secret: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> bool:
    """Delete ``room``, which disconnects everyone in it -- for a SIP caller, a hang-up.

    Idempotent, since a hang-up may be retried or race the caller leaving: True if this
    call deleted the room, False if there was no such room (or no name). Raises
    :class:`LiveKitUnavailable` on transient failures and :class:`LiveKitRefused` when the
    server refuses (e.g. credentials without the ``roomCreate`` grant); a missing credential
    raises ``ValueError``.
    """
    if not room:
        return False
    url, api_key, api_secret = _credentials(url, api_key, api_secret)
    try:
        async with _client(url, api_key, api_secret, timeout_s) as lk:
            await lk.room.delete_room(DeleteRoomRequest(room=room))
    except ServerError as err:
        if err.status == 404:
            return False
        if _is_transient(err):
            raise LiveKitUnavailable(f"LiveKit DeleteRoom '{room}' failed: {_describe(err)}") from err
        raise LiveKitRefused(f"LiveKit refused DeleteRoom '{room}': {_describe(err)}", err.status) from err
    except (TimeoutError, aiohttp.ClientError) as err:
        raise LiveKitUnavailable(
            f"LiveKit at {url} unreachable for DeleteRoom '{room}': {type(err).__name__}: {err}"
        ) from err
    return True


class JobMetadataError(ValueError):
    """A job's metadata could not be understood; the message says what is wrong with it."""


class JobInfo(BaseModel):
    """What a LiveKit job was dispatched for.

    ``resume`` jobs attach to the running workflow ``call_id`` (an agent replacing a lost
    one); others start a call, optionally on ``flow`` with initial ``variables`` (inbound
    SIP dispatch rules set those). Unknown keys are ignored so that newer dispatchers do
    not break older agents; known keys are type-checked strictly since machines write them.
    """

    model_config = ConfigDict(frozen=True, strict=True, extra="ignore")

    call_id: str | None = Field(default=None, min_length=1)
    resume: bool = False
    flow: str | None = Field(default=None, min_length=1)
    variables: dict[str, Any] = Field(default_factory=dict)
    # a dialed call: the callee's participant identity; the agent attaches once it joined
    wait_for: str | None = Field(default=None, min_length=1)
    # a warm transfer's consult room: say this to the person there, then leave
    announce: str | None = Field(default=None, max_length=MAX_ANNOUNCE_CHARS)

    @model_validator(mode="after")
    def _resume_needs_call(self) -> JobInfo:
        if self.resume and self.call_id is None:
            raise ValueError("resume is true but there is no call_id to resume")
        return self


def _preview(raw: str, limit: int = 80) -> str:
    return repr(raw if len(raw) <= limit else raw[:limit] + "...")


def parse_job_metadata(raw: str | None) -> JobInfo:
    """Read a job's metadata. Empty or missing metadata is a plain new call (``JobInfo()``).

    Malformed metadata raises :class:`JobMetadataError` (a ``ValueError``) with a one-line
    message -- never a JSON or pydantic traceback -- rather than returning a default: an agent
    that cannot tell whether it was sent to resume call X must not silently start a new call
    beside it; the caller decides (log the message and decline or hang up).
    """
    if raw is None or not raw.strip():
        return JobInfo()
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as err:
        raise JobMetadataError(
            f"job metadata is not valid JSON ({err.msg} at line {err.lineno} column {err.colno}): "
            f"{_preview(raw)}"
        ) from None
    if not isinstance(data, dict):
        raise JobMetadataError(
            f"job metadata must be a JSON object, got {type(data).__name__}: {_preview(raw)}"
        )
    try:
        return JobInfo.model_validate(data)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'metadata'}: {e['msg']}" for e in err.errors()
        )
        raise JobMetadataError(f"job metadata is invalid: {problems}") from None
