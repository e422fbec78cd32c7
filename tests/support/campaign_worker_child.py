"""A separate worker process for the SIGKILL case of ``tests/workflows/test_campaign_kill.py``: the
real worker (``workflows.worker.build_worker``), its telephony the parent's LiveKit fake.
It prints ``READY`` once polling and serves until it is killed.

    python -m tests.support.campaign_worker_child --address A --task-queue Q --database-url D \\
        --redis-url R --livekit-url U --livekit-key K --livekit-secret S
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from ringflow.agents.livekit_sip import LiveKitTelephony
from ringflow.settings import Settings
from ringflow.temporal_setup import connect
from ringflow.workflows.worker import build_worker


async def main(a: argparse.Namespace) -> None:
    phone = LiveKitTelephony(
        a.livekit_url,
        a.livekit_key,
        a.livekit_secret,
        agent_name="ringflow-test",
        trunk_id="ST_default",
        from_number="+15550111",
    )
    # The parent may have just (re)started the dev server: keep trying for a while, as a
    # worker pod whose server is still coming up would, instead of dying before READY.
    for attempt in range(30):
        try:
            client = await connect(a.address)
            break
        except Exception as exc:
            print(f"connect attempt {attempt + 1} failed: {exc!r}", file=sys.stderr, flush=True)
            await asyncio.sleep(1.0)
    else:
        raise SystemExit(f"no Temporal server at {a.address}")
    settings = Settings(database_url=a.database_url, redis_url=a.redis_url, http_allow_private=True)
    async with build_worker(client, settings, task_queue=a.task_queue, telephony=phone):
        print("READY", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    for name in (
        "address",
        "task-queue",
        "database-url",
        "redis-url",
        "livekit-url",
        "livekit-key",
        "livekit-secret",
    ):
        ap.add_argument(f"--{name}", required=True)
    asyncio.run(main(ap.parse_args()))
