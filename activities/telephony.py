"""Placing a phone call: the room, the agent, the dial; what the workflow orders for ``dial``
(the requests and results: ``ringflow/contract/dial.py``).

The order is LiveKit's own for outbound calls: create the room, dispatch the agent into it
(so it is there when the callee picks up), then ``CreateSIPParticipant`` with
``wait_until_answered``. Each is an activity; the telephony behind them is injected like
the agent dispatcher (the worker's entry point builds the LiveKit one when
``RINGFLOW_DISPATCHER=livekit``, the simulator passes its own), so this package needs no
LiveKit code.

A retried dial must never ring the callee twice, and LiveKit has no idempotency key for
``CreateSIPParticipant``: the participant identity is derived from the call id, so before
dialing the activity looks the participant up, and one that is there (ringing or answered)
is that earlier dial, followed instead of repeated (LiveKit adds the callee to the room when
it starts ringing). An attempt that lost its connection mid-request (the dial may have gone
out) records that as heartbeat details: a retry that finds that mark and no participant
reports the dial's outcome as unknown instead of dialing again. An HTTP answer without a
SIP status means the server did not dial (or the participant would be there).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Protocol

from temporalio import activity

from ringflow.activities.trunk_pace import LATE_S, reserve_again
from ringflow.contract.dial import (
    Dial,
    DialRequest,
    DialResult,
    PrepareRequest,
    PrepareResult,
    TransferRequest,
)


class Telephony(Protocol):
    async def prepare(self, req: PrepareRequest) -> PrepareResult: ...

    async def dial(self, req: DialRequest, dialed_before: bool) -> DialResult: ...

    async def hang_up(self, room: str) -> bool: ...

    async def transfer(self, req: TransferRequest, retry: bool) -> dict[str, Any]: ...


class NoTelephony:
    """Until one is configured: a call that must dial fails, saying why."""

    detail = "no telephony is configured (set RINGFLOW_DISPATCHER=livekit and LIVEKIT_*)"

    async def prepare(self, req: PrepareRequest) -> PrepareResult:
        return PrepareResult(ok=False, detail=self.detail)

    async def dial(self, req: DialRequest, dialed_before: bool) -> DialResult:
        return DialResult(outcome="dial_failed", detail=self.detail)

    async def hang_up(self, room: str) -> bool:
        return False

    async def transfer(self, req: TransferRequest, retry: bool) -> dict[str, Any]:
        return {"status": "failed", "detail": self.detail}


DIALED = "dialed"
# A dial waits for its slot (``Dial.not_before``) at most this long: the activity's timeout
# is the ringing time plus 30 s.
MAX_SLOT_WAIT_S = 20.0


class TelephonyActivities:
    """The dial activities bound to the telephony the worker was built with."""

    def __init__(self, telephony: Telephony | None = None, redis_url: str | None = None) -> None:
        self.telephony: Telephony = telephony or NoTelephony()
        self.redis_url = redis_url
        self._redis: Any = None

    async def _slot(self, dial: Dial) -> float | None:
        """When this dial may go: its slot, or a fresh one on its trunk's pace when it is
        late for it (``activities/trunk_pace.py``), so late dials never go out together."""
        slot = dial.not_before
        if slot is None or time.time() - slot <= LATE_S or not self.redis_url or not dial.trunk_id:
            return slot
        from redis.asyncio import Redis

        if self._redis is None:
            self._redis = Redis.from_url(self.redis_url)
        try:
            fresh = await reserve_again(self._redis, dial.trunk_id)
        except Exception:  # Redis unreachable: the slot it had is the best there is
            return slot
        return fresh if fresh is not None else slot

    @activity.defn(name="prepare_call")
    async def prepare_call(self, req: PrepareRequest) -> PrepareResult:
        return await self.telephony.prepare(req)

    @activity.defn(name="dial_call")
    async def dial_call(self, req: DialRequest) -> DialResult:
        details = activity.info().heartbeat_details
        dialed_before = bool(details) and details[0] == DIALED
        if not dialed_before and (slot := await self._slot(req.dial)) is not None:
            wait = min(slot - time.time(), MAX_SLOT_WAIT_S)
            if wait > 0:
                await asyncio.sleep(wait)
        return await self.telephony.dial(req, dialed_before)

    @activity.defn(name="transfer_call")
    async def transfer_call(self, req: TransferRequest) -> dict[str, Any]:
        """``retry``: an earlier attempt may have transferred the caller already; the telephony
        then reports a caller no longer on the line as transferred instead of failing."""
        return await self.telephony.transfer(req, activity.info().attempt > 1)

    @activity.defn(name="hang_up_room")
    async def hang_up_room(self, room: str) -> bool:
        return await self.telephony.hang_up(room)

    def all(self) -> list[Callable[..., Any]]:
        return [self.prepare_call, self.dial_call, self.transfer_call, self.hang_up_room]


def mark_dialed() -> None:
    """Called by a telephony when a dial may have gone out unanswered (see the module docstring)."""
    if activity.in_activity():
        activity.heartbeat(DIALED)
