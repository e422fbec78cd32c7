"""An aiohttp application served so that slow or idle clients cannot exhaust it.

aiohttp waits for a request's headers and body without a deadline, and takes every
connection it is offered: 1,100 unauthenticated connections that sent half a header held
1,100 files, and at an open-file limit of 1,024 LiveKit's next (signed) webhook could not
even be accepted. Here each connection must deliver a request's headers and then its body
within ``read_timeout_s``, and at most ``max_connections`` are open at once (never more
than half the process's open-file limit). A connection past the cap evicts the oldest one
still waiting for its headers (a slow client's), so a client that sends its request at
once, as LiveKit does, is served however many slow ones there are; only when every open
connection is being served is the new one refused.
"""

from __future__ import annotations

import asyncio
import resource
from collections import OrderedDict
from typing import Any

from aiohttp import web

READ_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 512
KEEPALIVE_S = 5.0


def connection_cap(wanted: int) -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(8, min(wanted, soft // 2))


class _Guard:
    """Open connections, and those waiting for a request (oldest first) with their timers."""

    def __init__(self, max_connections: int, read_timeout_s: float) -> None:
        self.max_connections = max_connections
        self.read_timeout_s = read_timeout_s
        self.open = 0
        self.waiting: OrderedDict[Any, asyncio.TimerHandle] = OrderedDict()

    def admit(self, transport: Any) -> bool:
        if self.open >= self.max_connections:
            if not self.waiting:
                return False
            oldest, timer = self.waiting.popitem(last=False)
            timer.cancel()
            oldest.abort()  # its connection_lost frees its place
        self.open += 1
        self.arm(transport)
        return True

    def arm(self, transport: Any) -> None:
        self.disarm(transport)
        loop = asyncio.get_running_loop()
        self.waiting[transport] = loop.call_later(self.read_timeout_s, self._expire, transport)

    def disarm(self, transport: Any) -> None:
        timer = self.waiting.pop(transport, None)
        if timer is not None:
            timer.cancel()

    def _expire(self, transport: Any) -> None:
        self.waiting.pop(transport, None)
        transport.abort()

    def closed(self, transport: Any) -> None:
        self.disarm(transport)
        self.open -= 1


class _GuardedProtocol(asyncio.Protocol):
    """aiohttp's protocol, behind the guard's admission and read deadline."""

    def __init__(self, inner: Any, guard: _Guard) -> None:
        self.inner = inner
        self.guard = guard
        self.admitted = False
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        if not self.guard.admit(transport):
            transport.abort()
            return
        self.admitted = True
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.admitted:
            self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.admitted else None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.admitted:
            self.guard.closed(self.transport)
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.admitted:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.admitted:
            self.inner.resume_writing()


class GuardedRunner:
    """What :func:`serve_guarded` returns: ``addresses`` and ``cleanup()``, like an AppRunner."""

    def __init__(self, runner: web.AppRunner, server: asyncio.Server, guard: _Guard) -> None:
        self.runner = runner
        self.server = server
        self.guard = guard

    @property
    def addresses(self) -> list[Any]:
        return [s.getsockname() for s in self.server.sockets]

    async def cleanup(self) -> None:
        self.server.close()
        await self.runner.cleanup()


async def serve_guarded(
    app: web.Application,
    host: str,
    port: int,
    *,
    max_connections: int = MAX_CONNECTIONS,
    read_timeout_s: float = READ_TIMEOUT_S,
) -> GuardedRunner:
    """Serve ``app`` on ``host:port`` behind the guard (see the module's docstring)."""
    guard = _Guard(connection_cap(max_connections), read_timeout_s)

    @web.middleware
    async def read_deadline(request: web.Request, handler: Any) -> web.StreamResponse:
        transport = request.transport
        if transport is not None:
            guard.disarm(transport)  # the headers came in time
        try:
            await asyncio.wait_for(request.read(), read_timeout_s)  # kept: the handler reads it again
        except TimeoutError:
            if transport is not None:
                transport.abort()
            raise web.HTTPRequestTimeout(text="request body too slow") from None
        except web.HTTPRequestEntityTooLarge:
            pass  # over the app's client_max_size: the handler answers it (and counts it) itself
        try:
            return await handler(request)
        finally:
            if transport is not None and not transport.is_closing():
                guard.arm(transport)  # a kept-alive connection's next request has the same deadline

    app.middlewares.append(read_deadline)
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=KEEPALIVE_S)
    await runner.setup()
    factory = runner.server
    assert factory is not None
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _GuardedProtocol(factory(), guard), host, port)
    return GuardedRunner(runner, server, guard)
