"""The SIP service of the LiveKit fake (``ringflow/simulation/livekit_fake.py``).

Split from the fake's core so each reads in one sitting; :class:`FakeLiveKit` mixes this in.
What it reproduces, from livekit-api (``sip_service.py``, ``twirp_client.py``,
``webhook.py``, ``access_token.py``) and the protocol (``livekit/sip.go``):

* **SIP grants**: trunk and dispatch-rule methods need ``sip.admin``; CreateSIPParticipant
  needs ``sip.call``; TransferSIPParticipant needs ``sip.call`` and ``roomAdmin`` for the room.
* **Dialing** (CreateSIPParticipant): the callee's answer is set per number with
  :meth:`SipFake.set_answer` (``human``, ``voicemail``, ``no_answer``, ``busy``, ``failed``,
  ``declined``). Answered calls put a SIP participant (kind SIP, the request's identity) in
  the room, created if need be. A failed call is a Twirp error whose ``meta`` holds
  ``sip_status_code`` and ``sip_status``, with the Twirp code the server derives from the
  SIP status (486 Busy Here -> ``resource_exhausted``, 408 -> ``deadline_exceeded``, 503 ->
  ``failed_precondition``, 603 -> ``permission_denied``), which the SDK turns into
  ``SipCallError``. Note that some of those HTTP statuses are 429/5xx: a client must look at
  the SIP status before deciding a failure is transient. Without ``wait_until_answered`` the
  reply comes at once and the outcome plays out after it.
* **Transfers** (SIP REFER): per destination answer as for dialing; a successful cold
  transfer removes the SIP participant from the room (the call left LiveKit).
* **Inbound trunks and dispatch rules**: create, list (with the id and number filters),
  update (``replace`` or field ``update``), delete; ids ``ST_...`` / ``SDR_...``.
* **Webhooks** (signed as the server signs them): ``ringflow/simulation/livekit_fake_webhooks.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from typing import Any

from google.protobuf.message import Message
from livekit.protocol import models as proto_models
from livekit.protocol import room as proto_room
from livekit.protocol import sip as proto_sip

from ringflow.simulation.livekit_fake_webhooks import WebhookFake

# answer -> (SIP code, reason phrase, Twirp code the server derives from it); None: answered
ANSWERS: dict[str, tuple[int, str, str] | None] = {
    "human": None,
    "voicemail": None,
    "no_answer": (408, "Request Timeout", "deadline_exceeded"),
    "unavailable": (480, "Temporarily Unavailable", "resource_exhausted"),
    "busy": (486, "Busy Here", "resource_exhausted"),
    "busy_everywhere": (600, "Busy Everywhere", "resource_exhausted"),
    "failed": (503, "Service Unavailable", "failed_precondition"),
    "declined": (603, "Decline", "permission_denied"),
}
Claims = dict[str, Any]


def _video_grant(claims: Claims) -> dict[str, Any]:
    grant = claims.get("video")
    return grant if isinstance(grant, dict) else {}


ANSWERED_BY = "ringflow.fake/answered_by"  # participant attribute: human or machine (for simulation)


class SipFake(WebhookFake):
    """SIP service state and handlers; a mixin of ``FakeLiveKit`` (uses its rooms and auth)."""

    api_key: str
    api_secret: str
    rooms: dict[str, Any]

    def _init_sip(self, webhook_url: str | None) -> None:
        self.answers: dict[str, str] = {}
        self.default_answer = "human"
        self.ring_s = 0.0  # how long the phone rings before the answer (bounded by ringing_timeout)
        # A number here rings until the test sets its event (then answers as set_answer says),
        # or until the dial's ringing timeout (then no_answer): a call held ringing, no timing.
        self.ring_gates: dict[str, asyncio.Event] = {}
        self.dials: list[proto_sip.CreateSIPParticipantRequest] = []
        self.dial_times: list[float] = []  # perf_counter() when each dial arrived (benches)
        self.transfers: list[proto_sip.TransferSIPParticipantRequest] = []
        self.moves: list[proto_room.MoveParticipantRequest] = []
        self.transfer_answers: dict[str, str] = {}
        self.transfer_default = "human"  # how a destination without an answer of its own answers
        self.inbound_trunks: dict[str, proto_sip.SIPInboundTrunkInfo] = {}
        # Listed, not enforced: a dial names any trunk (most tests never create one).
        self.outbound_trunks: dict[str, proto_sip.SIPOutboundTrunkInfo] = {}
        self.dispatch_rules: dict[str, proto_sip.SIPDispatchRuleInfo] = {}
        self._init_webhooks(webhook_url)
        self._background: set[asyncio.Task[Any]] = set()

    def _sip_routes(self) -> dict[str, tuple[type[Message], Any]]:
        return {
            "SIP/CreateSIPParticipant": (proto_sip.CreateSIPParticipantRequest, self._create_sip_participant),
            "SIP/TransferSIPParticipant": (proto_sip.TransferSIPParticipantRequest, self._transfer),
            "RoomService/MoveParticipant": (proto_room.MoveParticipantRequest, self._move),
            "SIP/CreateSIPInboundTrunk": (proto_sip.CreateSIPInboundTrunkRequest, self._create_trunk),
            "SIP/UpdateSIPInboundTrunk": (proto_sip.UpdateSIPInboundTrunkRequest, self._update_trunk),
            "SIP/ListSIPInboundTrunk": (proto_sip.ListSIPInboundTrunkRequest, self._list_trunks),
            "SIP/CreateSIPOutboundTrunk": (proto_sip.CreateSIPOutboundTrunkRequest, self._create_outbound),
            "SIP/ListSIPOutboundTrunk": (proto_sip.ListSIPOutboundTrunkRequest, self._list_outbound),
            "SIP/DeleteSIPTrunk": (proto_sip.DeleteSIPTrunkRequest, self._delete_trunk),
            "SIP/CreateSIPDispatchRule": (proto_sip.CreateSIPDispatchRuleRequest, self._create_rule),
            "SIP/UpdateSIPDispatchRule": (proto_sip.UpdateSIPDispatchRuleRequest, self._update_rule),
            "SIP/ListSIPDispatchRule": (proto_sip.ListSIPDispatchRuleRequest, self._list_rules),
            "SIP/DeleteSIPDispatchRule": (proto_sip.DeleteSIPDispatchRuleRequest, self._delete_rule),
        }

    # -- test controls ---------------------------------------------------------------------

    def add_outbound_trunk(self, number: str = "+15550100") -> str:
        """An outbound trunk as ``lk sip outbound create`` makes one; its id."""
        trunk = proto_sip.SIPOutboundTrunkInfo(
            sip_trunk_id=f"ST_{secrets.token_hex(6)}",
            name="test",
            address="sip.example.test",
            numbers=[number],
        )
        self.outbound_trunks[trunk.sip_trunk_id] = trunk
        return trunk.sip_trunk_id

    def set_answer(self, number: str, answer: str) -> None:
        """How ``number`` answers a dial (or a transfer to it): a key of :data:`ANSWERS`."""
        if answer not in ANSWERS:
            raise ValueError(f"unknown answer {answer!r}; one of {sorted(ANSWERS)}")
        self.answers[number] = answer
        self.transfer_answers[number] = answer

    def sip_participants(self, room: str) -> list[proto_models.ParticipantInfo]:
        found = self.rooms.get(room)
        return (
            [p for p in found.participants.values() if p.kind == proto_models.ParticipantInfo.SIP]
            if found
            else []
        )

    # -- errors and grants (FakeLiveKit provides TwirpError through _twirp_error) -------------

    def _twirp_error(self, code: str, msg: str, meta: dict[str, str] | None = None) -> Exception:
        raise NotImplementedError  # FakeLiveKit

    def _ensure_sip(self, claims: dict[str, Any], grant: str) -> None:
        sip = claims.get("sip")
        if not isinstance(sip, dict) or not sip.get(grant):
            raise self._twirp_error("unauthenticated", "permissions denied")

    def add_participant(
        self, room: str, identity: str, kind: int = 0, attributes: dict[str, str] | None = None
    ) -> proto_models.ParticipantInfo:
        raise NotImplementedError  # FakeLiveKit

    def remove_participant(self, room: str, identity: str, reason: int = 1) -> bool:
        raise NotImplementedError  # FakeLiveKit

    # -- dialing ---------------------------------------------------------------------------

    def _dial_error(self, answer: str) -> Exception | None:
        failure = ANSWERS[answer]
        if failure is None:
            return None
        code, phrase, twirp_code = failure
        return self._twirp_error(
            twirp_code, f"sip status {code}: {phrase}", {"sip_status_code": str(code), "sip_status": phrase}
        )

    async def _create_sip_participant(
        self, req: proto_sip.CreateSIPParticipantRequest, claims: Claims
    ) -> Message:
        self._ensure_sip(claims, "call")
        if not req.sip_trunk_id and not req.HasField("trunk"):
            raise self._twirp_error("invalid_argument", "missing sip trunk id")
        if not req.sip_call_to:
            raise self._twirp_error("invalid_argument", "missing sip call to")
        if not req.room_name:
            raise self._twirp_error("invalid_argument", "missing room name")
        self.dials.append(req)
        self.dial_times.append(time.perf_counter())
        identity = req.participant_identity or f"sip_{req.sip_call_to}"
        info = proto_sip.SIPParticipantInfo(
            participant_id=f"PA_{secrets.token_hex(6)}",
            participant_identity=identity,
            room_name=req.room_name,
            sip_call_id=f"SCL_{secrets.token_hex(6)}",
        )
        answer = self.answers.get(req.sip_call_to, self.default_answer)
        ringing = req.ringing_timeout.seconds if req.HasField("ringing_timeout") else 30
        ring_s = min(self.ring_s, float(ringing))

        # The callee is a participant from the start, ``sip.callStatus`` "dialing" while the
        # phone rings, "active" once answered; a failed call leaves the room.
        participant = self.add_participant(
            req.room_name,
            identity,
            proto_models.ParticipantInfo.SIP,
            {
                **dict(req.participant_attributes),
                "sip.callStatus": "dialing",
                "sip.phoneNumber": req.sip_call_to,
                "sip.trunkID": req.sip_trunk_id,
                "sip.callID": info.sip_call_id,
            },
        )

        gate = self.ring_gates.get(req.sip_call_to)

        async def ring() -> str:
            if gate is not None:
                try:
                    await asyncio.wait_for(gate.wait(), float(ringing))
                except TimeoutError:
                    return "no_answer"
            elif ring_s:
                await asyncio.sleep(ring_s)
            return answer

        def settle(answer: str) -> Exception | None:
            error = self._dial_error(answer)
            if error is not None:
                self.remove_participant(req.room_name, identity, proto_models.USER_UNAVAILABLE)
                return error
            participant.attributes["sip.callStatus"] = "active"
            participant.attributes[ANSWERED_BY] = "machine" if answer == "voicemail" else "human"
            return None

        if req.wait_until_answered:
            error = settle(await ring())
            if error is not None:
                raise error
            return info

        async def later() -> None:
            settle(await ring())

        task = asyncio.get_running_loop().create_task(later())
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return info

    async def _transfer(self, req: proto_sip.TransferSIPParticipantRequest, claims: Claims) -> Message:
        self._ensure_sip(claims, "call")
        video = _video_grant(claims)
        if not video.get("roomAdmin") or video.get("room", "") != req.room_name:
            raise self._twirp_error("unauthenticated", "permissions denied")
        room = self.rooms.get(req.room_name)
        if room is None or req.participant_identity not in room.participants:
            raise self._twirp_error("not_found", "participant not found")
        if room.participants[req.participant_identity].kind != proto_models.ParticipantInfo.SIP:
            raise self._twirp_error("invalid_argument", "participant is not a SIP participant")
        self.transfers.append(req)
        target = req.transfer_to.removeprefix("tel:").removeprefix("sip:")
        error = self._dial_error(self.transfer_answers.get(target, self.transfer_default))
        if error is not None:
            raise error
        self.remove_participant(req.room_name, req.participant_identity, proto_models.CLIENT_INITIATED)
        return proto_sip.TransferSIPParticipantResponse(transfer_id=f"STR_{secrets.token_hex(6)}")

    async def _move(self, req: proto_room.MoveParticipantRequest, claims: Claims) -> Message:
        """MoveParticipant (LiveKit Cloud): the participant leaves ``room`` and joins
        ``destination_room`` as it is; needs ``roomAdmin`` for the source room."""
        video = _video_grant(claims)
        if not video.get("roomAdmin") or video.get("room", "") != req.room:
            raise self._twirp_error("unauthenticated", "permissions denied")
        room = self.rooms.get(req.room)
        if room is None or req.identity not in room.participants:
            raise self._twirp_error("not_found", "participant not found")
        if req.destination_room not in self.rooms:
            raise self._twirp_error("not_found", "destination room not found")
        info = room.participants[req.identity]
        self.moves.append(req)
        self.remove_participant(req.room, req.identity, proto_models.CLIENT_INITIATED)
        self.add_participant(req.destination_room, req.identity, info.kind, dict(info.attributes))
        return proto_room.MoveParticipantResponse()

    # -- inbound trunks and dispatch rules ---------------------------------------------------

    async def _create_trunk(self, req: proto_sip.CreateSIPInboundTrunkRequest, claims: Claims) -> Message:
        self._ensure_sip(claims, "admin")
        trunk = proto_sip.SIPInboundTrunkInfo()
        trunk.CopyFrom(req.trunk)
        if trunk.sip_trunk_id:
            raise self._twirp_error("invalid_argument", "trunk id must not be set")
        if not (trunk.numbers or trunk.allowed_addresses or trunk.auth_username):
            raise self._twirp_error(
                "invalid_argument",
                "for security, one of the fields must be set: "
                "AuthUsername+AuthPassword, AllowedAddresses or Numbers",
            )
        for other in self.inbound_trunks.values():
            if set(other.numbers) & set(trunk.numbers):
                raise self._twirp_error("already_exists", "conflicting inbound trunk numbers")
        trunk.sip_trunk_id = f"ST_{secrets.token_hex(6)}"
        self.inbound_trunks[trunk.sip_trunk_id] = trunk
        return trunk

    async def _update_trunk(self, req: proto_sip.UpdateSIPInboundTrunkRequest, claims: Claims) -> Message:
        self._ensure_sip(claims, "admin")
        trunk = self.inbound_trunks.get(req.sip_trunk_id)
        if trunk is None:
            raise self._twirp_error("not_found", "trunk not found")
        if req.HasField("replace"):
            trunk.CopyFrom(req.replace)
            trunk.sip_trunk_id = req.sip_trunk_id
        elif req.HasField("update"):
            up = req.update
            if up.HasField("numbers"):
                _apply_list(trunk.numbers, up.numbers)
            for name in ("name", "metadata"):
                if up.HasField(name):
                    setattr(trunk, name, getattr(up, name))
        else:
            raise self._twirp_error("invalid_argument", "missing or unsupported update action")
        return trunk

    async def _list_trunks(self, req: proto_sip.ListSIPInboundTrunkRequest, claims: Claims) -> Message:
        self._ensure_sip(claims, "admin")
        items = [
            t
            for t in self.inbound_trunks.values()
            if (not req.trunk_ids or t.sip_trunk_id in req.trunk_ids)
            and (not req.numbers or set(req.numbers) & set(t.numbers))
        ]
        return proto_sip.ListSIPInboundTrunkResponse(items=items)

    async def _create_outbound(self, req: proto_sip.CreateSIPOutboundTrunkRequest, claims: Claims) -> Message:
        self._ensure_sip(claims, "admin")
        trunk = proto_sip.SIPOutboundTrunkInfo()
        trunk.CopyFrom(req.trunk)
        if not trunk.address or not trunk.numbers:
            raise self._twirp_error("invalid_argument", "an outbound trunk needs an address and numbers")
        trunk.sip_trunk_id = f"ST_{secrets.token_hex(6)}"
        self.outbound_trunks[trunk.sip_trunk_id] = trunk
        return trunk

    async def _list_outbound(self, req: proto_sip.ListSIPOutboundTrunkRequest, claims: Claims) -> Message:
        self._ensure_sip(claims, "admin")
        items = [
            t for t in self.outbound_trunks.values() if not req.trunk_ids or t.sip_trunk_id in req.trunk_ids
        ]
        return proto_sip.ListSIPOutboundTrunkResponse(items=items)

    async def _delete_trunk(self, req: proto_sip.DeleteSIPTrunkRequest, claims: Claims) -> Message:
        self._ensure_sip(claims, "admin")
        if self.inbound_trunks.pop(req.sip_trunk_id, None) is None:
            raise self._twirp_error("not_found", "trunk not found")
        return proto_sip.SIPTrunkInfo(sip_trunk_id=req.sip_trunk_id)

    async def _create_rule(self, req: proto_sip.CreateSIPDispatchRuleRequest, claims: Claims) -> Message:
        self._ensure_sip(claims, "admin")
        rule = proto_sip.SIPDispatchRuleInfo()
        if req.HasField("dispatch_rule"):
            rule.CopyFrom(req.dispatch_rule)
        else:
            rule.rule.CopyFrom(req.rule)
            rule.trunk_ids.extend(req.trunk_ids)
            rule.name, rule.metadata = req.name, req.metadata
            if req.HasField("room_config"):
                rule.room_config.CopyFrom(req.room_config)
        if not rule.HasField("rule"):
            raise self._twirp_error("invalid_argument", "missing dispatch rule")
        rule.sip_dispatch_rule_id = f"SDR_{secrets.token_hex(6)}"
        self.dispatch_rules[rule.sip_dispatch_rule_id] = rule
        return rule

    async def _update_rule(self, req: proto_sip.UpdateSIPDispatchRuleRequest, claims: Claims) -> Message:
        self._ensure_sip(claims, "admin")
        rule = self.dispatch_rules.get(req.sip_dispatch_rule_id)
        if rule is None:
            raise self._twirp_error("not_found", "dispatch rule not found")
        if req.HasField("replace"):
            rule.CopyFrom(req.replace)
            rule.sip_dispatch_rule_id = req.sip_dispatch_rule_id
        elif req.HasField("update"):
            up = req.update
            if up.HasField("trunk_ids"):
                _apply_list(rule.trunk_ids, up.trunk_ids)
            if up.HasField("rule"):
                rule.rule.CopyFrom(up.rule)
            for name in ("name", "metadata"):
                if up.HasField(name):
                    setattr(rule, name, getattr(up, name))
        else:
            raise self._twirp_error("invalid_argument", "missing or unsupported update action")
        return rule

    async def _list_rules(self, req: proto_sip.ListSIPDispatchRuleRequest, claims: Claims) -> Message:
        self._ensure_sip(claims, "admin")
        items = [
            r
            for r in self.dispatch_rules.values()
            if (not req.dispatch_rule_ids or r.sip_dispatch_rule_id in req.dispatch_rule_ids)
            and (not req.trunk_ids or set(req.trunk_ids) & set(r.trunk_ids))
        ]
        return proto_sip.ListSIPDispatchRuleResponse(items=items)

    async def _delete_rule(self, req: proto_sip.DeleteSIPDispatchRuleRequest, claims: Claims) -> Message:
        self._ensure_sip(claims, "admin")
        rule = self.dispatch_rules.pop(req.sip_dispatch_rule_id, None)
        if rule is None:
            raise self._twirp_error("not_found", "dispatch rule not found")
        return rule

    async def _stop_sip(self) -> None:
        await self._stop_webhooks()
        for task in self._background:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task


def _apply_list(target: Any, update: proto_models.ListUpdate) -> None:
    if update.set:
        del target[:]
        target.extend(update.set)
    for v in update.add:
        if v not in target:
            target.append(v)
    for v in update.remove:
        if v in target:
            target.remove(v)
