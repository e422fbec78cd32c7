"""LiveKit's webhooks received and relayed to the calls' workflows, as Ringflow runs the
receiver: alone (``ringflow webhooks``) or inside ``ringflow worker`` when
``RINGFLOW_LIVEKIT_WEBHOOK_PORT`` is set (``agents/webhooks.py`` is the receiver itself)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import Any

from ringflow.settings import Settings


def relay_problem(settings: Settings) -> str | None:
    """Why the receiver cannot run with these settings, or None: it verifies LiveKit's
    signatures with the API key and secret."""
    if not settings.livekit_api_key or not settings.livekit_api_secret:
        return (
            "the LiveKit webhook receiver needs LIVEKIT_API_KEY and LIVEKIT_API_SECRET (to verify signatures)"
        )
    return None


async def start_relay(settings: Settings, client: Any, host: str, port: int) -> Any:
    """The receiver on ``host:port``; returns its runner (``cleanup()`` stops it). The agent
    lease in Redis, when configured, tells a live agent's leaving from a replaced one's."""
    from ringflow.agents.webhooks import WebhookRelay, serve

    if (problem := relay_problem(settings)) is not None or settings.livekit_api_secret is None:
        raise ValueError(problem)  # the commands check first: see relay_problem
    lease = None
    if settings.redis_url:
        from redis.asyncio import Redis

        from ringflow.agents.lease import AgentLease

        lease = AgentLease(Redis.from_url(settings.redis_url), ttl_s=settings.call_agent_timeout_s)
    relay = WebhookRelay(
        client, settings.livekit_api_key or "", settings.livekit_api_secret.get_secret_value(), lease=lease
    )
    return await serve(relay, host, port)


class RelayProcess:
    """``ringflow webhooks`` as the worker's child: ``cleanup()`` stops it (SIGTERM, then kill)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def cleanup(self) -> None:
        if self.proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.terminate()
        try:
            await asyncio.wait_for(self.proc.wait(), 10)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.wait()


async def start_relay_process(host: str, port: int) -> RelayProcess:
    """The receiver in a process of its own, with the worker's environment (its settings):
    what a slow or hostile client of that port can exhaust is then that process's, not the
    worker's files and event loop."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ringflow.cli", "webhooks", "--host", host, "--port", str(port)
    )
    return RelayProcess(proc)
