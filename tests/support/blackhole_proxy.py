"""A TCP proxy that can black-hole its connections, as a network partition does.

Between a client and a real server (PostgreSQL here). ``black_hole()`` makes every
connection open now silent for good: what either side sends is read and dropped, nothing
is closed, so the client sees a half-open connection (no error, no answer), as after a
partition, a failover or a NAT that forgot the flow. Connections opened while black-holed
are silent too; after ``recover()`` new connections are forwarded again, but the silent
ones stay silent: only a client that gives up on them and connects anew gets through.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class BlackHoleProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.blackholed = False
        self.opened = 0  # connections accepted, in total
        self._silent: set[int] = set()  # ids of connections made silent
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    def black_hole(self) -> None:
        self.blackholed = True
        self._silent.update(range(self.opened))

    def recover(self) -> None:
        self.blackholed = False

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(BaseException):
                await t

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        cid = self.opened
        self.opened += 1
        if self.blackholed:
            self._silent.add(cid)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            if cid in self._silent:
                await self._swallow(reader)
                return
            up_reader, up_writer = await asyncio.open_connection(*self.target)
            await asyncio.gather(
                self._pipe(cid, reader, up_writer), self._pipe(cid, up_reader, writer), return_exceptions=True
            )
            up_writer.close()
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _swallow(self, reader: asyncio.StreamReader) -> None:
        while await reader.read(65536):
            pass

    async def _pipe(self, cid: int, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        while data := await src.read(65536):
            if cid in self._silent:
                await self._swallow(src)  # the wire went dead: never answer, never close
                return
            dst.write(data)
            await dst.drain()
        with contextlib.suppress(OSError):
            dst.write_eof()


@asynccontextmanager
async def blackhole_proxy(host: str, port: int) -> AsyncIterator[BlackHoleProxy]:
    proxy = BlackHoleProxy(host, port)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()
