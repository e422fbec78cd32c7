"""``ringflow worker`` as a pod runs it: signals, health endpoints, graceful shutdown.

Kubernetes stops a pod with SIGTERM and waits ``terminationGracePeriodSeconds``. Left to
Python's default, SIGTERM kills the process at once; the server then keeps routing each of
its calls' next workflow task to the dead worker's sticky queue until the sticky timeout
(~10 s) expires, and the caller hears nothing meanwhile. Here SIGTERM marks the worker
unready and runs ``Worker.shutdown()``, which releases the sticky queues so another worker
picks the calls up at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from typing import Any, NamedTuple

from temporalio.worker import Worker

from ringflow.activities.dispatch import Dispatcher
from ringflow.activities.telephony import Telephony
from ringflow.servers.health import HealthServer
from ringflow.settings import Settings
from ringflow.temporal_env import connect_options, describe
from ringflow.temporal_setup import connect

log = logging.getLogger("ringflow.worker")


class CallServices(NamedTuple):
    """What the worker's activities reach the world through, beyond plain settings."""

    dispatcher: Dispatcher | None = None
    telephony: Telephony | None = None


def call_services(settings: Settings) -> CallServices:
    """``RINGFLOW_DISPATCHER=livekit``: lost agents are re-dispatched and calls dialed through
    LiveKit, with the ``LIVEKIT_*`` credentials (``ValueError`` naming a missing one). Any
    other value: none (the simulator builds its own worker with its own)."""
    if settings.dispatcher != "livekit":
        return CallServices()
    from ringflow.agents.livekit_api import LiveKitDispatcher
    from ringflow.agents.livekit_sip import LiveKitTelephony

    secret = settings.livekit_api_secret.get_secret_value() if settings.livekit_api_secret else None
    credentials = (settings.livekit_url, settings.livekit_api_key, secret)
    return CallServices(
        LiveKitDispatcher(*credentials, agent_name=settings.agent_name),
        LiveKitTelephony(
            *credentials,
            agent_name=settings.agent_name,
            trunk_id=settings.sip_trunk_id,
            from_number=settings.sip_from,
            ringing_timeout_s=settings.sip_ringing_timeout_s,
        ),
    )


def database_stuck(limit_s: float) -> str | None:
    """Why the worker is not alive because of its database work, or None."""
    from ringflow.activities.db_work import DB_WORK

    waited = DB_WORK.oldest_s()
    if waited <= limit_s:
        return None
    return f"a database call has waited {waited:.0f} s (limit {limit_s:g} s; {DB_WORK.pending()} pending)"


async def serve(settings: Settings, services: CallServices | None = None) -> None:
    from ringflow.workflows.heap import GcPauses
    from ringflow.workflows.worker import prometheus_runtime, run_worker_forever

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    started: list[Worker] = []

    def ready() -> bool:
        return bool(started) and started[0].is_running and not stop.is_set()

    health = None
    if settings.health_port:
        health = HealthServer(
            settings.metrics_host,
            settings.health_port,
            ready,
            stuck=lambda: database_stuck(settings.database_stuck_s),
        )
        await health.start()
    try:
        runtime = prometheus_runtime(settings.metrics_port, settings.metrics_host)
        GcPauses(runtime.metric_meter).install()
        client = await connect(settings.temporal_address, settings.temporal_namespace, runtime=runtime)
        target = describe(connect_options(settings.temporal_address, settings.temporal_namespace))
        # a log line (JSON with `ringflow worker`), so stderr holds nothing but log lines
        log.info(
            "worker on %s, task queue %r, metrics on %s:%s/metrics%s",
            target,
            settings.task_queue,
            settings.metrics_host,
            settings.metrics_port,
            f", health on :{settings.health_port}" if health else "",
            extra={"event": "worker_started"},
        )
        relay: Any = None
        if settings.livekit_webhook_port:  # LiveKit's webhooks, received beside the worker
            from ringflow.servers.webhook_relay import start_relay, start_relay_process

            host, port = settings.metrics_host, settings.livekit_webhook_port
            if settings.livekit_webhook_in_worker:
                relay = await start_relay(settings, client, host, port)
            else:
                relay = await start_relay_process(host, port)
        try:
            services = services or CallServices()
            await run_worker_forever(
                client,
                settings,
                stop=stop,
                on_start=started.append,
                dispatcher=services.dispatcher,
                telephony=services.telephony,
            )
        finally:
            if relay is not None:
                await relay.cleanup()
        log.info("worker stopped gracefully", extra={"event": "worker_stopped"})
    finally:
        if health is not None:
            health.stop()
