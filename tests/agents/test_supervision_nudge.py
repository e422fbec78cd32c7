"""A supervisor's action reaches the bot through a Redis nudge (``agents/supervision_nudge.py``),
not the clock: with the agent's poll and backstop set to an hour, a whisper sent through the
command path (``ringflow.supervisors.supervise``, as the CLI, the API and the console send it)
is applied by the real agent at once, one read of the supervision for each nudge. Real Redis,
a real dev server and worker, the agent in livekit-agents text mode."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis
from temporalio.client import Client

from ringflow.contract.supervision import SupervisorRequest
from ringflow.simulation.scripted_llm import ScriptedLLM
from ringflow.supervisors import supervise
from tests.support.agentkit import text_call
from tests.support.wfkit import running_worker, wait_until

REDIS = "redis://127.0.0.1:6379/0"
HOUR = 3600.0


async def _subscribed(redis: Redis, call_id: str) -> bool | None:
    got = await redis.pubsub_numsub(f"ringflow:supervision:{call_id}")
    return True if got and got[0][1] >= 1 else None


@pytest.mark.timeout(120)
async def test_a_whisper_reaches_the_bot_by_its_nudge_and_costs_one_read(
    temporal_client: Client, task_queue: str, sqlite_url: str, llm: ScriptedLLM
) -> None:
    redis = Redis.from_url(REDIS, socket_timeout=2, socket_connect_timeout=2)
    options = {"supervisor_poll_s": HOUR, "supervisor_backstop_s": HOUR, "nudges": redis}
    try:
        async with (
            running_worker(temporal_client, task_queue, sqlite_url),
            text_call(temporal_client, task_queue, llm, agent=options) as tc,
        ):
            ctrl, feed, call_id = tc.controller, tc.run.supervisors, tc.call.call_id
            await wait_until(lambda: _subscribed(redis, call_id), what="the agent subscribed")
            reads = [0]
            read = feed.poll

            async def counted() -> None:  # the feed's loop calls self.poll: each read counted
                reads[0] += 1
                await read()

            feed.poll = counted  # type: ignore[method-assign]
            for n, text in enumerate(("Offer Tuesday.", "Mention the parking."), start=1):
                req = SupervisorRequest(action="whisper", text=text, by="ann")
                await supervise(temporal_client, call_id, req, redis_url=REDIS)

                async def applied(n: int = n) -> bool | None:
                    return True if ctrl.state.supervisor_seen == n else None

                await wait_until(applied, what=f"whisper {n} applied")
                assert reads[0] == n  # one read a nudge; the hour-long clock read none
            assert (await tc.call.supervision()).actions[-1].text == "Mention the parking."
    finally:
        await redis.aclose()
