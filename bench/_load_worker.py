"""The baseline's worker process for bench/load.py: ``python bench/_load_worker.py ADDRESS
NAMESPACE TASK_QUEUE``. A process of its own, like ``ringflow worker`` for Ringflow, so each
side's CPU is measured apart from the load generator's."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _baseline import LoadBaseline
from temporalio.client import Client
from temporalio.worker import Worker


async def main(address: str, namespace: str, task_queue: str) -> None:
    client = await Client.connect(address, namespace=namespace)
    async with Worker(client, task_queue=task_queue, workflows=[LoadBaseline]):
        await asyncio.Event().wait()


if __name__ == "__main__":
    try:
        asyncio.run(main(*sys.argv[1:4]))
    except KeyboardInterrupt:
        pass
