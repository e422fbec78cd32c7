"""One agent per call: a lease in Redis.

A dispatch can be duplicated (a CreateDispatch that timed out after the server accepted
it is retried), and a slow agent can come back after it was replaced. Two agents
talking on one line is worse than none, so before an agent attaches it takes the
call's lease; it renews it with its heartbeats and loses it when it stops renewing. A
newer agent may take over a lease that expired (the old agent is presumed dead) but
never one that is being renewed.
"""

from __future__ import annotations

from redis.asyncio import Redis

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
