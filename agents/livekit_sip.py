"""LiveKit telephony: the ``Telephony`` of ``activities.telephony`` on LiveKit's server APIs.

``prepare`` creates the call's room (metadata ``{"call_id": ...}``, which is how the webhook
receiver maps a room back to its call) and dispatches the agent into it, once: an existing
dispatch for the call is found with ``ListDispatch`` and not repeated. ``dial`` is
``CreateSIPParticipant`` with ``wait_until_answered`` and the ring window, after looking for
the participant an earlier attempt may have created (see ``activities/telephony.py``).

Failures follow ``agents/livekit_api.py``: transient ones (connection errors, 5xx/429
*without* a SIP status) raise :class:`LiveKitUnavailable` for Temporal to retry; refusals are
results. A SIP status in the error's metadata is the callee's answer, final whatever the HTTP
status (LiveKit reports 486 Busy Here as Twirp ``resource_exhausted``, HTTP 429, and 408 as
``deadline_exceeded``, HTTP 504), so it is read before the HTTP status.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
from google.protobuf.duration_pb2 import Duration
from livekit.api import (
    CreateAgentDispatchRequest,
    CreateRoomRequest,
    CreateSIPParticipantRequest,
    ListParticipantsRequest,
    ListSIPOutboundTrunkRequest,
    LiveKitAPI,
    MoveParticipantRequest,
    ParticipantInfo,
    RoomParticipantIdentity,
    ServerError,
    SipCallError,
    TransferSIPParticipantRequest,
)

from ringflow.activities.telephony import mark_dialed
from ringflow.agents.livekit_api import (
    DEFAULT_AGENT_NAME,
    DEFAULT_TIMEOUT_S,
    LiveKitUnavailable,
    _client,
    _credentials,
    _describe,
    _is_transient,
    close_room,
)
from ringflow.contract.dial import (
    DEFAULT_RINGING_TIMEOUT_S,
    Dial,
    DialRequest,
    DialResult,
    PrepareRequest,
    PrepareResult,
    TransferRequest,
    outcome_of,
    sip_identity,
)

ANSWERED_BY = "ringflow.fake/answered_by"  # set by the test fake only; real AMD is the agent's
POLL_S = 0.5


def dial_metadata(call_id: str, identity: str) -> str:
    """Job metadata of the first agent of a dialed call: attach once ``wait_for`` joined."""
    return json.dumps({"call_id": call_id, "resume": False, "wait_for": identity})


class LiveKitTelephony:
    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        api_secret: str | None = None,
        *,
        agent_name: str = DEFAULT_AGENT_NAME,
        trunk_id: str | None = None,
        from_number: str | None = None,
        ringing_timeout_s: float = DEFAULT_RINGING_TIMEOUT_S,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        """The entry point passes ``trunk_id``, ``from_number`` and ``ringing_timeout_s`` from
        its settings (``RINGFLOW_SIP_*``); a dial's own values win over them."""
        self.url, self.api_key, self._api_secret = _credentials(url, api_key, api_secret)
        self.agent_name = agent_name
        self.trunk_id = trunk_id or None
        self.from_number = from_number or None
        self.ringing_timeout_s = ringing_timeout_s
        self.timeout_s = timeout_s

    def __repr__(self) -> str:  # never the secret
        return f"LiveKitTelephony(url={self.url!r}, api_key={self.api_key!r}, trunk_id={self.trunk_id!r})"

    def _lk(self, timeout_s: float | None = None) -> LiveKitAPI:
        return _client(self.url, self.api_key, self._api_secret, timeout_s or self.timeout_s)

    async def trunk_problem(self, trunk_id: str) -> str | None:
        """Why calls cannot go out through ``trunk_id`` (LiveKit unreachable, credentials
        refused, no such outbound trunk), or None: ``campaign start`` asks before it claims a
        contact, so a campaign without telephony fails at once instead of burning its
        contacts to ``dial_failed``."""
        try:
            async with self._lk() as lk:
                found = await lk.sip.list_outbound_trunk(ListSIPOutboundTrunkRequest(trunk_ids=[trunk_id]))
        except ServerError as err:
            if err.status in (401, 403):
                return (
                    f"LiveKit at {self.url} refused the credentials ({_describe(err)}): "
                    "check LIVEKIT_API_KEY and LIVEKIT_API_SECRET"
                )
            return f"LiveKit at {self.url} could not list outbound trunks ({_describe(err)})"
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            return f"LiveKit at {self.url} does not answer ({type(err).__name__}): check LIVEKIT_URL"
        if not any(t.sip_trunk_id == trunk_id for t in found.items):
            return (
                f"LiveKit at {self.url} has no outbound trunk {trunk_id!r}: create one "
                "(`lk sip outbound create`) or pass --trunk / RINGFLOW_SIP_TRUNK_ID with an existing one"
            )
        return None

    async def prepare(self, req: PrepareRequest) -> PrepareResult:
        step = "CreateRoom"
        try:
            async with self._lk() as lk:
                await lk.room.create_room(
                    CreateRoomRequest(name=req.room, metadata=json.dumps({"call_id": req.call_id}))
                )
                step = "ListDispatch"
                listed = await lk.agent_dispatch.list_dispatch(req.room)
                if any(_call_of(d.metadata) == req.call_id for d in listed):
                    return PrepareResult(ok=True, detail="room and agent dispatch were already there")
                step = "CreateDispatch"
                await lk.agent_dispatch.create_dispatch(
                    CreateAgentDispatchRequest(
                        agent_name=req.agent_name or self.agent_name,
                        room=req.room,
                        metadata=dial_metadata(req.call_id, sip_identity(req.call_id)),
                    )
                )
        except ServerError as err:
            if _is_transient(err):
                raise LiveKitUnavailable(f"LiveKit {step} for call {req.call_id}: {_describe(err)}") from err
            return PrepareResult(
                ok=False, detail=f"LiveKit refused {step} for room '{req.room}' ({_describe(err)})"
            )
        except (TimeoutError, aiohttp.ClientError) as err:
            raise LiveKitUnavailable(
                f"LiveKit at {self.url} unreachable during {step}: {type(err).__name__}: {err}"
            ) from err
        return PrepareResult(ok=True, detail=f"room '{req.room}' created, agent dispatched")

    async def dial(self, req: DialRequest, dialed_before: bool) -> DialResult:
        ring_s = req.dial.ringing_timeout_s or self.ringing_timeout_s
        trunk = req.dial.trunk_id or self.trunk_id
        if not trunk:
            return DialResult(
                outcome="dial_failed", detail="no SIP trunk: set RINGFLOW_SIP_TRUNK_ID or pass --trunk"
            )
        try:
            earlier = await self._follow_earlier(req, ring_s)
            if earlier is not None:
                return earlier
            if dialed_before:
                return DialResult(
                    outcome="dial_failed",
                    detail=("an earlier attempt sent the dial and its outcome is unknown; not dialing twice"),
                )
            create = CreateSIPParticipantRequest(
                sip_trunk_id=trunk,
                sip_call_to=req.dial.to,
                room_name=req.room,
                participant_identity=req.identity,
                participant_name="callee",
                wait_until_answered=True,
                ringing_timeout=Duration(seconds=int(ring_s)),
                play_dialtone=False,
            )
            if req.dial.from_number or self.from_number:
                create.sip_number = req.dial.from_number or self.from_number or ""
            async with self._lk(ring_s + 10) as lk:
                await lk.sip.create_sip_participant(create, timeout=ring_s + 5)
        except SipCallError as err:
            code = err.sip_status_code
            if code is not None:
                return DialResult(outcome=outcome_of(code), sip_code=code, sip_status=err.sip_status)
            return self._server_error(req, err)
        except ServerError as err:
            return self._server_error(req, err)
        except (TimeoutError, aiohttp.ClientError) as err:
            mark_dialed()  # the dial may have gone out, and the call may be over by the retry
            raise LiveKitUnavailable(
                f"LiveKit at {self.url} unreachable while dialing for call "
                f"{req.call_id}: {type(err).__name__}: {err}"
            ) from err
        return DialResult(outcome="answered", sip_code=200, sip_status="OK", detail="answered")

    def _server_error(self, req: DialRequest, err: ServerError) -> DialResult:
        if _is_transient(err):
            raise LiveKitUnavailable(
                f"LiveKit CreateSIPParticipant for call {req.call_id}: {_describe(err)}"
            ) from err
        return DialResult(outcome="dial_failed", detail=f"LiveKit refused the dial ({_describe(err)})")

    async def _follow_earlier(self, req: DialRequest, ring_s: float) -> DialResult | None:
        """The participant an earlier attempt dialed, followed to its outcome; None if none."""
        deadline = asyncio.get_running_loop().time() + ring_s + 5
        async with self._lk() as lk:
            while True:
                try:
                    p = await lk.room.get_participant(
                        RoomParticipantIdentity(room=req.room, identity=req.identity)
                    )
                except ServerError as err:
                    if err.status == 404:
                        return None  # nobody dialed it (or the earlier dial ended: see below)
                    raise
                status = p.attributes.get("sip.callStatus", "active")
                if status == "active":
                    return DialResult(
                        outcome="answered",
                        sip_code=200,
                        sip_status="OK",
                        followed=True,
                        answered_by=p.attributes.get(ANSWERED_BY),
                        detail="an earlier attempt's dial was answered",
                    )
                if status == "hangup" or asyncio.get_running_loop().time() > deadline:
                    return DialResult(
                        outcome="no_answer",
                        followed=True,
                        detail="an earlier attempt's dial ended unanswered",
                    )
                await asyncio.sleep(POLL_S)

    async def transfer(self, req: TransferRequest, retry: bool) -> dict[str, Any]:
        """Cold transfer (SIP REFER) of the call's SIP participant to ``req.to``. A retry that
        finds no caller left takes it that an earlier attempt transferred them: never twice."""
        if req.mode == "warm":
            return await self._warm(req)
        to = req.to if req.to.startswith(("tel:", "sip:")) else f"tel:{req.to}"
        try:
            async with self._lk(60) as lk:
                listed = await lk.room.list_participants(ListParticipantsRequest(room=req.room))
                callers = [p for p in listed.participants if p.kind == ParticipantInfo.SIP]
                if not callers:
                    return _gone(req, retry)
                await lk.sip.transfer_sip_participant(
                    TransferSIPParticipantRequest(
                        room_name=req.room,
                        participant_identity=callers[0].identity,
                        transfer_to=to,
                        play_dialtone=False,
                    ),
                    timeout=45,
                )
        except SipCallError as err:
            if err.sip_status_code is not None or err.sip_transfer_reason:
                return {
                    "status": "failed",
                    "to": req.to,
                    "sip_code": err.sip_status_code,
                    "detail": str(err)[:300],
                }
            return self._transfer_error(req, err, retry)
        except ServerError as err:
            return self._transfer_error(req, err, retry)
        except (TimeoutError, aiohttp.ClientError) as err:
            raise LiveKitUnavailable(
                f"LiveKit at {self.url} unreachable during a transfer: {type(err).__name__}: {err}"
            ) from err
        return {"status": "transferred", "to": req.to}

    async def _warm(self, req: TransferRequest) -> dict[str, Any]:
        """Warm transfer, as livekit-agents' WarmTransferTask does it: the person is dialed into
        a consult room (``<room>-consult``), an agent job there tells them ``announce``, then
        they are moved into the caller's room (MoveParticipant, which only LiveKit Cloud serves:
        on the open-source server the move fails, the person is hung up and the caller goes to
        the entry's fallback; see docs/operating.md, "Transfers"). Each step is found done on a
        retry (the person already in the caller's room, or ringing or answered in the consult
        room, the announcer already dispatched), so nobody is dialed or moved twice."""
        consult, identity = f"{req.room}-consult", f"transfer-{req.call_id}"
        done = {"status": "transferred", "to": req.to, "mode": "warm"}
        try:
            async with self._lk() as lk:
                if await _present(lk, req.room, identity):  # an earlier attempt moved them
                    await self.hang_up(consult)
                    return {**done, "detail": "an earlier attempt connected them"}
                await lk.room.create_room(
                    CreateRoomRequest(
                        name=consult, metadata=json.dumps({"call_id": req.call_id, "consult": True})
                    )
                )
            person = Dial(to=req.to, ringing_timeout_s=req.ringing_timeout_s)
            answer = await self.dial(
                DialRequest(call_id=req.call_id, room=consult, identity=identity, dial=person),
                dialed_before=False,
            )
            if answer.outcome != "answered":
                await self.hang_up(consult)
                return {
                    "status": "failed",
                    "to": req.to,
                    "mode": "warm",
                    "sip_code": answer.sip_code,
                    "detail": f"{answer.outcome}: {answer.detail or answer.sip_status or ''}".strip(": "),
                }
            async with self._lk() as lk:
                if not any(_announces(d.metadata) for d in await lk.agent_dispatch.list_dispatch(consult)):
                    await lk.agent_dispatch.create_dispatch(
                        CreateAgentDispatchRequest(
                            agent_name=self.agent_name,
                            room=consult,
                            metadata=json.dumps(
                                {"call_id": req.call_id, "announce": req.announce or DEFAULT_ANNOUNCE}
                            ),
                        )
                    )
                problem = await _announced(lk, consult, identity)
                if problem is not None:
                    await self.hang_up(consult)
                    return {"status": "failed", "to": req.to, "mode": "warm", "detail": problem}
                try:
                    await lk.room.move_participant(
                        MoveParticipantRequest(room=consult, identity=identity, destination_room=req.room)
                    )
                except ServerError as err:
                    if _is_transient(err) and not _unimplemented(err):
                        raise  # retried: the retry finds the person moved, or moves them
                    await self.hang_up(consult)  # the person must not wait there for nobody
                    return {"status": "failed", "to": req.to, "mode": "warm", "detail": _move_refused(err)}
            await self.hang_up(consult)  # the announcer leaves with the room
        except ServerError as err:
            if _is_transient(err):
                raise LiveKitUnavailable(
                    f"LiveKit warm transfer for call {req.call_id}: {_describe(err)}"
                ) from err
            return {
                "status": "failed",
                "to": req.to,
                "mode": "warm",
                "detail": f"LiveKit refused a step of the transfer ({_describe(err)})",
            }
        except (TimeoutError, aiohttp.ClientError) as err:
            raise LiveKitUnavailable(
                f"LiveKit at {self.url} unreachable during a transfer: {type(err).__name__}: {err}"
            ) from err
        return done

    def _transfer_error(self, req: TransferRequest, err: ServerError, retry: bool) -> dict[str, Any]:
        if _is_transient(err):
            raise LiveKitUnavailable(f"LiveKit transfer for call {req.call_id}: {_describe(err)}") from err
        if err.status == 404:
            return _gone(req, retry)
        return {
            "status": "failed",
            "to": req.to,
            "detail": f"LiveKit refused the transfer ({_describe(err)})",
        }

    async def hang_up(self, room: str) -> bool:
        return await close_room(
            room, url=self.url, api_key=self.api_key, api_secret=self._api_secret, timeout_s=self.timeout_s
        )


DEFAULT_ANNOUNCE = "I have a caller for you; I'm connecting you now."
ANNOUNCED = "ringflow.announced"  # the announcer's participant attribute once it has spoken
ANNOUNCE_TIMEOUT_S = 60.0


def _announces(metadata: str) -> bool:
    try:
        return isinstance(data := json.loads(metadata or "{}"), dict) and "announce" in data
    except json.JSONDecodeError:
        return False


async def _present(lk: Any, room: str, identity: str) -> bool:
    try:
        await lk.room.get_participant(RoomParticipantIdentity(room=room, identity=identity))
    except ServerError as err:
        if err.status == 404:
            return False
        raise
    return True


async def _announced(lk: Any, consult: str, identity: str) -> str | None:
    """Wait until the announcer has spoken (its ``ringflow.announced`` attribute); a reason
    when the person hung up first or it took too long."""
    deadline = asyncio.get_running_loop().time() + ANNOUNCE_TIMEOUT_S
    while True:
        people = (await lk.room.list_participants(ListParticipantsRequest(room=consult))).participants
        if not any(p.identity == identity for p in people):
            return "the person hung up before the caller was connected"
        if any(p.kind == ParticipantInfo.AGENT and p.attributes.get(ANNOUNCED) for p in people):
            return None
        if asyncio.get_running_loop().time() > deadline:
            return f"the announcement did not finish within {ANNOUNCE_TIMEOUT_S:g} s"
        await asyncio.sleep(POLL_S)


def _unimplemented(err: ServerError) -> bool:
    return err.code == "unimplemented" or "not implemented" in (err.message or "").lower()


def _move_refused(err: ServerError) -> str:
    """MoveParticipant is a LiveKit Cloud (and private cloud) API: the open-source server
    answers it "not implemented" (an HTTP 500, which would otherwise read as transient)."""
    return (
        f"LiveKit refused MoveParticipant ({_describe(err)}): a warm transfer needs a LiveKit "
        "server that can move participants (LiveKit Cloud); use mode cold on the open-source server"
    )[:300]


def _gone(req: TransferRequest, retry: bool) -> dict[str, Any]:
    if retry:
        return {
            "status": "transferred",
            "to": req.to,
            "detail": "the caller had left the room: an earlier attempt transferred them",
        }
    return {"status": "failed", "to": req.to, "detail": "no caller on the line to transfer"}


def _call_of(metadata: str) -> str | None:
    try:
        data = json.loads(metadata or "{}")
    except json.JSONDecodeError:
        return None
    return data.get("call_id") if isinstance(data, dict) else None
