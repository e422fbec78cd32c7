"""Fixtures of the agent's tests: a real Redis for the lease and the outbox journal."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError


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
