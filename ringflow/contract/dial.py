"""Placing a call: the room, the agent dispatched into it, the dial, a transfer.

What the workflow orders (``workflows/dialing.py``), the activities carry out
(``activities/telephony.py``, ``activities/dispatch.py``) and the agent process's LiveKit
telephony answers (``agents/livekit_sip.py``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Outcome = Literal["answered", "no_answer", "busy", "dial_failed"]
DEFAULT_RINGING_TIMEOUT_S = 30.0
MAX_ANNOUNCE_CHARS = 2000  # what a warm transfer's agent says to the person it consults


class Dial(BaseModel):
    """Whom an outbound call rings. Unset fields come from the worker's settings
    (``RINGFLOW_SIP_TRUNK_ID``, ``RINGFLOW_SIP_FROM``, ``RINGFLOW_SIP_RINGING_TIMEOUT_S``)."""

    to: str = Field(min_length=3, max_length=64, pattern=r"^\+?[0-9A-Za-z*#@.:_-]+$")
    from_number: str | None = Field(None, max_length=64, pattern=r"^\+?[0-9A-Za-z*#@.:_-]+$")
    trunk_id: str | None = Field(None, max_length=128)
    ringing_timeout_s: float | None = Field(None, gt=0, le=300)
    # A campaign's attempt: its slot on the trunk's pace (epoch seconds). The call is started
    # a little ahead of it (room and agent ready) and the dial waits for it, so the dials keep
    # the pace whatever the workflow's own latency (rounds, continue-as-new).
    not_before: float | None = Field(None, allow_inf_nan=False)


class PrepareRequest(BaseModel):
    call_id: str
    room: str
    agent_name: str | None = None


class PrepareResult(BaseModel):
    ok: bool
    detail: str = ""


class DialRequest(BaseModel):
    call_id: str
    room: str
    dial: Dial
    identity: str


class TransferRequest(BaseModel):
    call_id: str
    room: str
    to: str = Field(min_length=3, max_length=128)
    mode: Literal["cold", "warm"] = "cold"
    announce: str | None = Field(None, max_length=MAX_ANNOUNCE_CHARS)
    ringing_timeout_s: float = Field(DEFAULT_RINGING_TIMEOUT_S, gt=0, le=300)


class DialResult(BaseModel):
    outcome: Outcome
    sip_code: int | None = None
    sip_status: str | None = None
    detail: str = ""
    answered_by: str | None = None  # "machine" when the telephony knows (simulation)
    followed: bool = False  # an earlier attempt had dialed: this one followed it, not a new dial


def outcome_of(sip_code: int | None) -> Outcome:
    """LiveKit's SIP status of a failed dial, as an end reason: nobody picked up (ringing
    timeout, 408 Request Timeout, 480 Temporarily Unavailable, 487 cancelled while ringing),
    busy (486 Busy Here, 600 Busy Everywhere), anything else a failed dial."""
    if sip_code in (408, 480, 487):
        return "no_answer"
    if sip_code in (486, 600):
        return "busy"
    return "dial_failed"


def sip_identity(call_id: str) -> str:
    """The callee's participant identity: one per call, so a retry can find an earlier dial."""
    return f"sip-{call_id}"


class DispatchRequest(BaseModel):
    call_id: str
    room: str | None = None
    attempt: int = 1


class DispatchResult(BaseModel):
    dispatched: bool
    detail: str = ""
