"""``ringflow api``: the HTTP API and console under uvicorn, until SIGTERM or SIGINT.

Stateless: keys and idempotency records are in the database, calls in Temporal, so any
number of replicas serve the same API (the rate limit is per replica).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ringflow.settings import Settings

if TYPE_CHECKING:
    from temporalio.client import Client


def serve(settings: Settings, host: str, port: int) -> None:
    import uvicorn

    from ringflow.api.app import create_app

    config = uvicorn.Config(
        create_app(settings),
        host=host,
        port=port,
        log_level=settings.log_level.lower(),
        access_log=True,  # method, path, status: the Authorization header is never logged
        proxy_headers=True,
        server_header=False,
    )
    uvicorn.Server(config).run()


class Beside:
    """The API serving inside another process's event loop (``serve_beside``)."""

    def __init__(self, server: Any, task: asyncio.Task[None]) -> None:
        self.server = server
        self.task = task

    async def stop(self) -> None:
        """Close the listener and let requests in flight finish (uvicorn's own shutdown)."""
        self.server.should_exit = True
        await asyncio.wait({self.task}, timeout=10)


async def serve_beside(settings: Settings, client: Client, host: str, port: int) -> Beside:
    """The API in the running event loop, on ``client`` (``ringflow dev``: beside its worker);
    the caller's signal handling stays its own. Returns once it listens."""
    import contextlib

    import uvicorn

    from ringflow.api.app import create_app

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield  # Ctrl-C and SIGTERM are the host process's to handle

    server = Server(uvicorn.Config(create_app(settings, client), host=host, port=port, log_level="warning"))
    task = asyncio.ensure_future(server.serve())
    while not server.started and not task.done():
        await asyncio.sleep(0.05)  # uvicorn sets `started` once bound; a busy port ends the task
    if task.done():
        task.result()
        raise OSError(f"the API could not listen on {host}:{port}")
    return Beside(server, task)
