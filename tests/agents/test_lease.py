"""The one-agent-per-call lease, against the real Redis on 127.0.0.1:6379."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from ringflow.agents.lease import AgentLease, LeaseHeld


@pytest_asyncio.fixture
async def redis() -> AsyncIterator[Redis]:
    client = Redis(host="127.0.0.1", port=6379)
    try:
        await client.ping()
    except RedisConnectionError as exc:
        pytest.skip(f"Redis not reachable on 127.0.0.1:6379: {exc}")
    yield client
    keys = await client.keys("test-lease-*")
    if keys:
        await client.delete(*keys)
    await client.aclose()


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
