"""A supervisor's action wakes the call's agent at once: a message on the call's Redis channel.

The agent reads its call's supervision with a query (``agents/supervised.py``), and Temporal
Cloud bills every query as an action: read once a second, that was 60 actions a call-minute,
three times what the rest of the call costs (``bench/load.py``,
``billable_actions_per_call_minute``). With Redis, whoever records a supervisor action
(``ringflow/supervisors.py``: the CLI, the HTTP API and its console) publishes on
``ringflow:supervision:<call id>`` once the workflow has recorded it, and the agent,
subscribed, reads the supervision at once. Pub/sub is at most once and a publisher may have
no Redis, so the agent still reads on a slow backstop (``RINGFLOW_SUPERVISOR_BACKSTOP_S``).
An agent without Redis, or whose subscription failed, reads every ``supervisor_poll_s`` as
before.

The message carries the call id only: the agent reads what changed from the workflow, the
one record of supervisors' actions, so a forged or repeated message costs one read and
changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)

CHANNEL_PREFIX = "ringflow:supervision:"


def channel(call_id: str) -> str:
    return f"{CHANNEL_PREFIX}{call_id}"


async def publish(redis: Any, call_id: str) -> int:
    """Wake the call's agent; how many subscribers heard it (0: none listening)."""
    heard: int = await redis.publish(channel(call_id), call_id)
    return heard


class Nudges:
    """One call's subscription, opened by the agent when it attaches."""

    def __init__(self, redis: Any, call_id: str) -> None:
        self.call_id = call_id
        self.pubsub = redis.pubsub(ignore_subscribe_messages=True)

    async def open(self) -> None:
        """Subscribed once this returns: the feed's first read comes after it, so a nudge sent
        before it is not missed."""
        await self.pubsub.subscribe(channel(self.call_id))

    async def wait(self, timeout_s: float) -> bool:
        """True when a nudge came within ``timeout_s`` (the ones queued behind it are
        dropped: one read answers them all). The subscription's own confirmation is not a
        nudge: redis-py answers None for it, and the wait goes on."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while (left := deadline - loop.time()) > 0:
            if await self.pubsub.get_message(timeout=left) is not None:
                while await self.pubsub.get_message(timeout=0) is not None:
                    pass
                return True
        return False

    async def close(self) -> None:
        try:
            await self.pubsub.aclose()
        except Exception as exc:  # closing a broken connection: nothing left to free
            log.debug("supervision nudges for %s: close failed: %s", self.call_id, type(exc).__name__)
