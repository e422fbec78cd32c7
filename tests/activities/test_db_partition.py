"""A PostgreSQL partition: the worker's pooled connections go half-open (a TCP proxy between
the worker and the real PostgreSQL black-holes them: no answer, no close), then the
network recovers. Before, each write waited on its dead connection for ever, the default
executor's threads ran out, no new connection was opened and ``/livez`` stayed 200. Now
every round trip has a deadline, a dead connection is dropped from the pool, liveness
sees database work waiting, and calls that end after recovery are all persisted."""

from __future__ import annotations

import asyncio

from sqlalchemy.engine import make_url
from temporalio.client import Client

from ringflow.activities.persistence import DatabaseLimits, configure_database, load_call
from ringflow.servers.worker import database_stuck
from tests.support.blackhole_proxy import blackhole_proxy
from tests.support.hostile import hooks
from tests.support.wfkit import running_worker, start, wait_until


async def test_calls_that_end_after_a_partition_are_persisted(
    temporal_client: Client, task_queue: str, postgres_url: str
) -> None:
    target = make_url(postgres_url)
    async with blackhole_proxy(target.host or "127.0.0.1", target.port or 5432) as proxy:
        url = target.set(port=proxy.port).render_as_string(hide_password=False)
        try:
            async with (
                hooks() as rec,
                running_worker(
                    temporal_client,
                    task_queue,
                    url,
                    webhook_url=rec.url,
                    database_statement_timeout_s=1.0,
                    database_connect_timeout_s=2.0,
                    database_threads=3,
                ),
            ):
                # Warm the pool: three calls that end at once leave connections in it.
                warm = [await start(temporal_client, task_queue) for _ in range(3)]
                await asyncio.gather(*(c.hangup() for c in warm))
                await asyncio.gather(*(c.handle.result() for c in warm))
                opened = proxy.opened
                assert opened >= 1

                proxy.black_hole()
                calls = [await start(temporal_client, task_queue) for _ in range(3)]
                await calls[0].hangup()  # its record meets a dead connection
                reason = await wait_until(
                    lambda: _now(database_stuck(0.5)), timeout=30, what="liveness to see the stuck write"
                )
                assert "a database call has waited" in reason

                proxy.recover()
                await asyncio.gather(*(c.hangup() for c in calls[1:]))
                results = await asyncio.gather(
                    *(wait_until(lambda c=c: c.handle.result(), timeout=120, what="a result") for c in calls)
                )
                assert [r.end_reason for r in results] == ["user_hangup"] * 3
                assert database_stuck(0.5) is None
        finally:
            configure_database(DatabaseLimits())
    for c in warm + calls:  # read straight from PostgreSQL, not through the proxy
        stored = load_call(c.call_id, database_url=postgres_url)
        assert stored is not None and stored.status == "ended", c.call_id
    assert proxy.opened > opened  # new connections replaced the dead ones
    assert {b["call_id"] for b in rec.bodies} >= {c.call_id for c in calls}


async def _now(value: str | None) -> str | None:
    await asyncio.sleep(0)
    return value
