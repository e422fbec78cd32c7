"""A separate worker process for ``tests/workflows/test_jobs_kill.py`` and
``tests/activities/test_handler_retry.py``: the real worker
(``workflows.worker.build_worker``) trusting the fixture flow's handlers. It prints
``READY`` once polling and serves until it is killed.

    python -m tests.support.jobs_worker_child --address A --task-queue Q --database-url D --flows-dir F
"""

from __future__ import annotations

import argparse
import asyncio

from ringflow.settings import Settings
from ringflow.temporal_setup import connect
from ringflow.workflows.worker import build_worker


async def main(a: argparse.Namespace) -> None:
    client = await connect(a.address)
    settings = Settings(database_url=a.database_url, flows_dir=a.flows_dir, http_allow_private=True)
    async with build_worker(client, settings, task_queue=a.task_queue):
        print("READY", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    for name in ("address", "task-queue", "database-url", "flows-dir"):
        ap.add_argument(f"--{name}", required=True)
    asyncio.run(main(ap.parse_args()))
