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
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic import SecretStr
from temporalio.client import Client
from temporalio.runtime import Runtime
from temporalio.service import RPCError
from temporalio.worker import Worker

from ringflow.activities.dispatch import Dispatcher
from ringflow.activities.recording import Recorder
from ringflow.activities.telephony import Telephony
from ringflow.core_logs import core_logging
from ringflow.servers.health import HealthServer
from ringflow.settings import Settings
from ringflow.temporal_env import connect_options, describe
from ringflow.temporal_setup import connect

if TYPE_CHECKING:
    from ringflow.agents.livekit_egress import StoreCredentials

log = logging.getLogger("ringflow.worker")
FIRST_CONNECT_DELAYS_S = (0.5, 30.0)  # the first retry's wait, doubling up to the second


class WorkerStartError(RuntimeError):
    """The worker cannot start for a reason its operator must fix (a port in use): the
    message says which and how; ``ringflow worker`` prints it as one line."""


async def connect_with_backoff(
    settings: Settings, runtime: Runtime, stop: asyncio.Event, **kwargs: Any
) -> Client | None:
    """Connect to Temporal, retrying with exponential backoff while it cannot be reached: a
    Temporal blip (or a server that starts after the worker's pod) costs a wait and one log
    line per try, not a crash loop. None when ``stop`` was set first."""
    target = describe(connect_options(settings.temporal_address, settings.temporal_namespace))
    delay, cap = FIRST_CONNECT_DELAYS_S
    while True:
        try:
            return await asyncio.wait_for(
                connect(settings.temporal_address, settings.temporal_namespace, runtime=runtime, **kwargs), 10
            )
        except (RPCError, RuntimeError, OSError, TimeoutError) as err:
            # the exception's type, not its message (ringflow/logs.py): the address says where
            log.warning(
                "cannot reach Temporal at %s (%s); retrying in %.1f s",
                target,
                type(err).__name__,
                delay,
                extra={"event": "temporal_unreachable"},
            )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
            return None
        delay = min(delay * 2, cap)


class CallServices(NamedTuple):
    """What the worker's activities reach the world through, beyond plain settings."""

    dispatcher: Dispatcher | None = None
    telephony: Telephony | None = None
    recorder: Recorder | None = None


def call_services(settings: Settings) -> CallServices:
    """``RINGFLOW_DISPATCHER=livekit``: lost agents are re-dispatched and calls dialed through
    LiveKit, with the ``LIVEKIT_*`` credentials (``ValueError`` naming a missing one). Any
    other value: none (the simulator builds its own worker with its own)."""
    if settings.dispatcher != "livekit":
        return CallServices()
    from ringflow.agents.livekit_api import LiveKitDispatcher
    from ringflow.agents.livekit_egress import LiveKitRecorder
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
        LiveKitRecorder(*credentials, credentials=store_credentials(settings)),
    )


def store_credentials(settings: Settings) -> StoreCredentials:
    """The recording stores' keys, from ``RINGFLOW_RECORDING_*``."""
    from ringflow.agents.livekit_egress import StoreCredentials

    def secret(value: SecretStr | None) -> str | None:
        return value.get_secret_value() if value else None

    return StoreCredentials(
        s3_access_key=settings.recording_s3_access_key,
        s3_secret=secret(settings.recording_s3_secret),
        s3_region=settings.recording_s3_region,
        s3_endpoint=settings.recording_s3_endpoint,
        s3_force_path_style=settings.recording_s3_force_path_style,
        gcp_credentials=secret(settings.recording_gcp_credentials),
        azure_account=settings.recording_azure_account,
        azure_key=secret(settings.recording_azure_key),
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
        try:
            await health.start()
        except OSError as err:
            raise WorkerStartError(
                f"health port {settings.metrics_host}:{settings.health_port} is not free "
                f"({err.strerror or err}): set RINGFLOW_HEALTH_PORT to a free port, or 0 to turn it off"
            ) from None
    try:
        try:
            runtime = prometheus_runtime(settings.metrics_port, settings.metrics_host, core_logging())
        except ValueError:  # "Failed starting Prometheus exporter: Address already in use"
            raise WorkerStartError(
                f"metrics port {settings.metrics_host}:{settings.metrics_port} is not free: "
                "set RINGFLOW_METRICS_PORT to a free port"
            ) from None
        GcPauses(runtime.metric_meter).install()
        client = await connect_with_backoff(
            settings,
            runtime,
            stop,
            refuse_plaintext_inputs=settings.encryption and not settings.allow_plaintext_inputs,
        )
        if client is None:
            return
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
                recorder=services.recorder,
            )
        finally:
            if relay is not None:
                await relay.cleanup()
        log.info("worker stopped gracefully", extra={"event": "worker_stopped"})
    finally:
        if health is not None:
            health.stop()
