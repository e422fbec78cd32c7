"""The trunk's pace on the real Redis: no one-second window holds more than ``cps`` slots,
and a dial late for its slot takes a fresh one instead of going out with the others (a
campaign's first second once dialed 10 calls at cps 4: the calls of a round started late
and every late dial went at once)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from redis.asyncio import Redis
from temporalio.testing import ActivityEnvironment

from ringflow.activities.telephony import TelephonyActivities
from ringflow.activities.trunk_pace import reserve_slot_at
from ringflow.contract.dial import (
    Dial,
    DialRequest,
    DialResult,
    PrepareRequest,
    PrepareResult,
    TransferRequest,
)
from tests.support.campaignkit import REDIS


def most_in_one_second(times: list[float]) -> int:
    """The most of ``times`` in any closed one-second window."""
    times = sorted(times)
    return max(sum(1 for u in times if t <= u <= t + 1.0) for t in times)


class RecordingLine:
    """A telephony that only notes when each dial went out."""

    def __init__(self) -> None:
        self.dialed_at: list[float] = []

    async def prepare(self, req: PrepareRequest) -> PrepareResult:
        return PrepareResult(ok=True)

    async def dial(self, req: DialRequest, dialed_before: bool) -> DialResult:
        self.dialed_at.append(time.time())
        return DialResult(outcome="answered")

    async def hang_up(self, room: str) -> bool:
        return True

    async def transfer(self, req: TransferRequest, retry: bool) -> dict[str, Any]:
        return {}


async def test_no_second_holds_more_than_cps_slots() -> None:
    redis = Redis.from_url(REDIS)
    trunk = f"T{uuid.uuid4().hex[:8]}"
    try:
        slots = [(await reserve_slot_at(redis, trunk, 4.0))[0] for _ in range(12)]
    finally:
        await redis.aclose()
    assert slots == sorted(slots) and most_in_one_second(slots) == 4


async def test_a_late_dial_takes_a_fresh_slot_on_its_trunk() -> None:
    redis = Redis.from_url(REDIS)
    trunk = f"T{uuid.uuid4().hex[:8]}"
    try:
        reserved = [(await reserve_slot_at(redis, trunk, 4.0))[0] for _ in range(4)]
    finally:
        await redis.aclose()
    line = RecordingLine()
    acts = TelephonyActivities(line, REDIS)
    late = Dial(to="+12125550190", trunk_id=trunk, not_before=reserved[0] - 2.0)  # its call started late
    req = DialRequest(call_id="c-late", room="c-late", dial=late, identity="sip-c-late")
    assert (await ActivityEnvironment().run(acts.dial_call, req)).outcome == "answered"
    # after every slot already reserved on the trunk, at the pace: never with them at once
    assert line.dialed_at[0] >= reserved[-1] + 0.25
