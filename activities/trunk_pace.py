"""One pace per trunk, in Redis: the slots dials take, shared by every campaign and worker.

A slot is the trunk's last one plus the interval, reserved atomically by a Lua script on
Redis' own clock, in microseconds. The interval is a little over ``1/cps`` (one
microsecond more), so that no one-second window, ends included, holds more than ``cps``
slots: carriers count dials per second. A dial that reaches its slot late (its call's
start took longer than the lead, as when a round starts a batch of calls at once on a busy
worker) takes a fresh slot instead of dialing at once: late dials once went out together,
10 in the first second of a campaign at cps 4.
"""

from __future__ import annotations

import math

from redis.asyncio import Redis

# KEYS[1]: the trunk's last slot (µs); ARGV[1]: the interval (µs), kept beside it for the
# late dials, which know the trunk but not the campaign's cps.
_RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
if interval == nil then
  interval = tonumber(redis.call('GET', KEYS[1] .. ':interval') or '')
  if interval == nil then
    return {now, 0}
  end
end
local last = tonumber(redis.call('GET', KEYS[1]) or '0')
local slot = math.max(now, last + interval)
local ttl = math.floor((slot - now) / 1000) + 60000
redis.call('SET', KEYS[1], string.format('%d', slot), 'PX', ttl)
redis.call('SET', KEYS[1] .. ':interval', string.format('%d', interval), 'PX', ttl)
return {string.format('%d', slot), string.format('%d', slot - now)}
"""
LATE_S = 0.05  # a dial this late for its slot takes a fresh one


def pacer_key(trunk: str) -> str:
    return f"ringflow:pace:{trunk}"


def interval_us(cps: float) -> int:
    """The spacing of slots: ``cps`` of them never fall in one second, ends included."""
    return math.floor(1_000_000 / cps) + 1


async def reserve_slot_at(redis: Redis, trunk: str, cps: float) -> tuple[float, float]:
    """The next slot on the trunk (epoch seconds, Redis' clock) and the seconds until it."""
    slot, wait = await redis.eval(_RESERVE, 1, pacer_key(trunk), interval_us(cps))
    return int(slot) / 1e6, int(wait) / 1e6


async def reserve_again(redis: Redis, trunk: str) -> float | None:
    """A fresh slot for a late dial, at the pace the trunk's campaigns set; None when the
    trunk has no pace (no campaign reserved a slot on it within the last minute)."""
    slot, wait = await redis.eval(_RESERVE, 1, pacer_key(trunk), "")
    return int(slot) / 1e6 if int(wait) or await redis.exists(pacer_key(trunk) + ":interval") else None
