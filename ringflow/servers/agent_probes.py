"""What the agent tells LiveKit and Kubernetes about itself: its load, its liveness, its readiness.

LiveKit's default load is the CPU use of the whole node (psutil), so an agent in a pod with
no CPU limit is "idle" while the node's other pods are busy and "full" because of them, and
the autoscaler (which counts calls) disagrees with it. The load here is the share of
``RINGFLOW_AGENT_MAX_CALLS`` the agent's jobs take: LiveKit stops offering calls at exactly
that many, and the autoscaler, scaling on ``ringflow_agent_calls_active``, adds pods well
before (see infra/k8s).

LiveKit's own health endpoint answers 200 while the agent is still connecting, or
reconnecting after losing LiveKit, and 503 only once it gave up. A pod in that state
takes no calls, so it must not count as ready: ``/readyz`` answers 200 only while the
agent is registered with LiveKit and not draining. ``/`` keeps LiveKit's meaning for the
liveness probe (a lost connection is retried; only giving up, or a dead inference
process, is fatal).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from livekit.agents import AgentServer

# LiveKit marks the worker full when its load reaches this; with the load below that is
# when its jobs reach RINGFLOW_AGENT_MAX_CALLS.
LOAD_THRESHOLD = 1.0


def calls_load(active: int, max_calls: int) -> float:
    """The agent's load: the share of its call capacity in use (1.0 and above: full)."""
    return active / max_calls


class CallsLoad:
    """``AgentServer(load_fnc=...)``: the share of ``max_calls`` the server's jobs take."""

    def __init__(self, max_calls: int) -> None:
        self.max_calls = max_calls

    def __call__(self, server: AgentServer) -> float:
        return calls_load(len(server.active_jobs), self.max_calls)


def registered(server: AgentServer) -> tuple[bool, str]:
    """Whether LiveKit would offer this agent a call now, and why not."""
    # LiveKit exposes the worker id (set by its register response) but not the connection
    # state: ``_connecting`` is true from each (re)connect attempt until LiveKit answers the
    # registration, ``_connection_failed`` once it gave up.
    if getattr(server, "_connection_failed", False):
        return False, "gave up connecting to LiveKit"
    if server.id == "unregistered" or getattr(server, "_connecting", True):
        return False, "not registered with LiveKit"
    if server.draining:
        return False, "draining"
    return True, "registered"


class AgentProbes:
    """``/`` (liveness, LiveKit's semantics), ``/readyz`` (registered) and ``/worker``."""

    def __init__(self, server: AgentServer, host: str, port: int) -> None:
        self._server = server
        self._host = host
        self.port = port
        self._runner: web.AppRunner | None = None
        self._starting: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/", self._live)
        app.router.add_get("/livez", self._live)
        app.router.add_get("/readyz", self._ready)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self.port)
        await site.start()
        if self.port == 0:
            self.port = self._runner.addresses[0][1]

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _live(self, _: web.Request) -> web.Response:
        inference = getattr(self._server, "_inference_executor", None)
        if inference is not None and not inference.is_alive():
            return web.Response(status=503, text="inference process not running")
        if getattr(self._server, "_connection_failed", False):
            return web.Response(status=503, text="failed to connect to livekit")
        return web.Response(text="OK")

    async def _ready(self, _: web.Request) -> web.Response:
        ok, why = registered(self._server)
        return web.Response(status=200 if ok else 503, text=why)

    def start_with_server(self) -> None:
        """Serve once LiveKit's server runs (its ``worker_started`` event, in its loop)."""

        def started() -> None:
            task = asyncio.get_running_loop().create_task(self.start())
            self._starting.add(task)
            task.add_done_callback(self._starting.discard)

        self._server.on("worker_started", started)
