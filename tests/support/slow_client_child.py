"""The LiveKit webhook receiver and the health port in a process of their own, at a low
open-file limit, for ``tests/agents/test_slow_clients.py`` to attack with slow clients.

    python -m tests.support.slow_client_child --nofile 256 --api-key K --api-secret S

Prints ``PORTS <webhook> <health>`` and serves until its stdin closes.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
from typing import Any, cast

from ringflow.agents.webhooks import WebhookRelay, bound_port, serve
from ringflow.servers.health import HealthServer


async def main(args: argparse.Namespace) -> None:
    # The receiver never reaches Temporal here: the test sends only events it ignores.
    relay = WebhookRelay(cast(Any, None), args.api_key, args.api_secret)
    runner = await serve(relay, "127.0.0.1", 0)
    health = HealthServer("127.0.0.1", 0, lambda: True)
    await health.start()
    print(f"PORTS {bound_port(runner)} {health.port}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    health.stop()
    await runner.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--nofile", type=int, required=True)
    parser.add_argument("--api-key", required=True)
    parser.add_argument("--api-secret", required=True)
    ns = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (ns.nofile, hard))
    asyncio.run(main(ns))
