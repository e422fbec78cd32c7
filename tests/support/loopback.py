"""Small HTTP servers on loopback that tests point calls at: a webhook receiver answering
from a script of status codes, an API that fails a few times first, and the plumbing that
serves an aiohttp app on a free port."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from aiohttp import web


@asynccontextmanager
async def serve_app(app: web.Application) -> AsyncIterator[str]:
    """``app`` served on 127.0.0.1 on a port the OS picks, as ``http://127.0.0.1:PORT``;
    stopped on exit."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@dataclass
class Receiver:
    """A local webhook endpoint answering from a script of status codes, then 200."""

    url: str = ""
    script: list[int] = field(default_factory=list)
    deliveries: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    retry_after: str | None = None

    async def handle(self, request: web.Request) -> web.Response:
        self.deliveries.append((dict(request.headers), await request.read()))
        self.changed.set()
        status = self.script.pop(0) if self.script else 200
        headers = {"Retry-After": self.retry_after} if self.retry_after else {}
        return web.json_response({"ok": status < 300}, status=status, headers=headers)

    async def wait_for(self, count: int, timeout: float = 30) -> None:
        async with asyncio.timeout(timeout):
            while len(self.deliveries) < count:
                self.changed.clear()
                await self.changed.wait()


@asynccontextmanager
async def flaky_api(failures: int) -> AsyncIterator[tuple[str, list[str]]]:
    """An HTTP API that answers 503 ``failures`` times, then 200; records idempotency keys."""
    keys: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        keys.append(request.headers.get("Idempotency-Key", ""))
        if len(keys) <= failures:
            return web.json_response({"error": "busy"}, status=503)
        return web.json_response({"file": request.query.get("key"), "attempt": len(keys)})

    app = web.Application()
    app.router.add_get("/file", handle)
    async with serve_app(app) as url:
        yield url, keys
