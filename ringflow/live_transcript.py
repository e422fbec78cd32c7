"""The turns a live call's agent still holds, for ``ringflow call show`` and the API.

While a call talks, its agent's outbox holds transcript turns for up to a heartbeat interval
before they ride to the workflow with the next state change (``agents/outbox.py``), so the
workflow's transcript trails the conversation by up to that interval. The held turns are in
the call's outbox journal in Redis (``agents/journal.py``); an operator watching a call sees
them too, marked as held, not yet durable in the workflow.
"""

from __future__ import annotations

from typing import Any

from ringflow.contract.events import TurnsEvent
from ringflow.contract.journal import entries_from, journal_key


async def held_turns(redis_url: str | None, call_id: str, next_seq: int) -> list[dict[str, Any]]:
    """The journal's turns the workflow has not applied yet (seq at or past ``next_seq``),
    each marked ``held``; none without Redis or when it cannot be read (the view is a
    convenience: the workflow's transcript stays what the command shows first)."""
    if not redis_url:
        return []
    from redis.asyncio import Redis

    redis = Redis.from_url(redis_url, socket_timeout=3, socket_connect_timeout=3)
    try:
        rows = await redis.xrange(journal_key(call_id))
    except Exception:
        return []
    finally:
        await redis.aclose()
    found = entries_from(list(rows or []), next_seq)
    return [
        {**t.model_dump(mode="json"), "held": True}
        for ev in found.events
        if isinstance(ev, TurnsEvent)
        for t in ev.items
    ]
