"""The one-agent-per-call lease, against the real Redis on 127.0.0.1:6379."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from redis.asyncio import Redis

from ringflow.agents.lease import AgentLease, LeaseCheck, LeaseHeld


def lease(redis: Redis, ttl_s: float = 5.0) -> AgentLease:
    return AgentLease(redis, ttl_s=ttl_s, prefix=f"test-lease-{uuid.uuid4().hex[:8]}:")


async def test_second_agent_is_refused_while_the_first_renews(redis: Redis) -> None:
    leases = lease(redis)
    await leases.acquire("call-1", "agent-a")
    with pytest.raises(LeaseHeld, match="agent-a"):
        await leases.acquire("call-1", "agent-b")
    assert await leases.renew("call-1", "agent-a")
    assert not await leases.renew("call-1", "agent-b")  # renewing someone else's lease does nothing
    assert await leases.holder("call-1") == "agent-a"
    await leases.acquire("call-1", "agent-a")  # re-acquiring your own lease is fine


async def test_an_expired_lease_can_be_taken_over(redis: Redis) -> None:
    leases = lease(redis, ttl_s=0.2)
    await leases.acquire("call-2", "agent-a")
    deadline = time.monotonic() + 5
    while await leases.holder("call-2") is not None:  # wait for Redis to expire it
        assert time.monotonic() < deadline, "lease did not expire"
        await asyncio.sleep(0.05)
    await leases.acquire("call-2", "agent-b")
    assert not await leases.renew("call-2", "agent-a")  # the old agent learns it lost the call
    assert await leases.holder("call-2") == "agent-b"


async def test_release_only_by_the_holder(redis: Redis) -> None:
    leases = lease(redis)
    await leases.acquire("call-3", "agent-a")
    assert not await leases.release("call-3", "agent-b")
    assert await leases.release("call-3", "agent-a")
    assert await leases.holder("call-3") is None


async def test_the_check_before_acting_sees_a_released_or_taken_lease(redis: Redis) -> None:
    """What the agent asks before it speaks or moves the call: the relay releasing the
    lease (LiveKit said the agent left) or a newer agent taking it shows at the next check,
    not at the next heartbeat; a check within ``fresh_s`` of a good one is not repeated."""
    leases = lease(redis)
    now = [100.0]
    check = LeaseCheck(leases, "call-4", "agent-a", fresh_s=0.5, clock=lambda: now[0])
    await leases.acquire("call-4", "agent-a")
    assert await check.held()
    assert await leases.release("call-4", "agent-a")  # what WebhookRelay does on agent_left
    now[0] += 0.4
    assert await check.held()  # fresh: no round trip
    now[0] += 0.2
    assert not await check.held()
    await leases.acquire("call-4", "agent-b")
    assert not await check.held()
    assert await leases.holder("call-4") == "agent-b"  # the failed check took nothing from b


async def test_the_check_goes_on_when_redis_is_unreachable(caplog: pytest.LogCaptureFixture) -> None:
    """Redis away must not silence a healthy call: the workflow's epoch still refuses a
    replaced agent's events. Said once, not at every action."""
    dead = Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    check = LeaseCheck(AgentLease(dead), "call-5", "agent-a", fresh_s=0.0)
    assert await check.held() and await check.held()
    assert [r.levelname for r in caplog.records if "could not be checked" in r.getMessage()] == ["WARNING"]
    await dead.aclose()
