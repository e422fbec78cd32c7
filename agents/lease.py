"""One agent per call: a lease in Redis.

A dispatch can be duplicated (a CreateDispatch that timed out after the server accepted
it is retried), and a slow agent can come back after it was replaced. Two agents
talking on one line is worse than none, so before an agent attaches it takes the
call's lease; it renews it with its heartbeats and loses it when it stops renewing. A
newer agent may take over a lease that expired (the old agent is presumed dead) but
never one that is being renewed. The agent also checks it before it acts on the room
(:class:`LeaseCheck`), so a lease taken from it stops it at its next action.

The lease keeps a second agent off the line; what keeps a second agent from moving the
call is the workflow's epoch (``workflows/epochs.py``), which holds with or without Redis.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from redis.asyncio import Redis
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""


class LeaseHeld(RuntimeError):
    """Another live agent holds the call; this one must not attach."""


class AgentLease:
    def __init__(self, redis: Redis, ttl_s: float = 15.0, prefix: str = "ringflow:agent-lease:") -> None:
        self.redis = redis
        self.ttl_ms = int(ttl_s * 1000)
        self.prefix = prefix

    def key(self, call_id: str) -> str:
        return f"{self.prefix}{call_id}"

    async def acquire(self, call_id: str, agent_id: str) -> None:
        """Take the lease or raise :class:`LeaseHeld` naming the holder."""
        ok = await self.redis.set(self.key(call_id), agent_id, nx=True, px=self.ttl_ms)
        if ok:
            return
        holder = await self.redis.get(self.key(call_id))
        holder = holder.decode() if isinstance(holder, bytes) else holder
        if holder == agent_id:
            await self.renew(call_id, agent_id)
            return
        raise LeaseHeld(f"call {call_id} is held by agent {holder}")

    async def renew(self, call_id: str, agent_id: str) -> bool:
        """False if the lease was lost (expired and maybe taken): stop talking on this call."""
        return bool(await self.redis.eval(_RENEW, 1, self.key(call_id), agent_id, self.ttl_ms))

    async def release(self, call_id: str, agent_id: str) -> bool:
        return bool(await self.redis.eval(_RELEASE, 1, self.key(call_id), agent_id))

    async def holder(self, call_id: str) -> str | None:
        value = await self.redis.get(self.key(call_id))
        return value.decode() if isinstance(value, bytes) else value


class LeaseCheck:
    """The agent's check of its lease before it acts on the room (speaks, moves the call,
    hangs up): a lease the webhook relay released (LiveKit said this agent left) or a newer
    agent took is seen at the next action, not at the next heartbeat (up to 20 s later).

    A check within ``fresh_s`` of the last one that found the lease held is not repeated:
    an action's several steps (a tool call, then the node it enters) cost one Redis round
    trip, not one each. Redis unreachable: the agent goes on (the workflow's epoch still
    refuses a replaced agent's events, ``workflows/epochs.py``), and says so once."""

    def __init__(
        self,
        lease: AgentLease,
        call_id: str,
        agent_id: str,
        *,
        fresh_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lease = lease
        self.call_id = call_id
        self.agent_id = agent_id
        self.fresh_s = fresh_s
        self.clock = clock
        self.held_at = float("-inf")
        self.unreachable = False

    async def held(self) -> bool:
        now = self.clock()
        if now - self.held_at < self.fresh_s:
            return True
        try:
            ok = await self.lease.renew(self.call_id, self.agent_id)
        except (RedisError, OSError) as exc:
            if not self.unreachable:
                log.warning("call %s: the agent lease could not be checked (%s); going on", self.call_id, exc)
            self.unreachable = True
            return True
        self.unreachable = False
        if ok:
            self.held_at = now
        return ok
