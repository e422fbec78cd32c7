"""Slow clients against the LiveKit webhook receiver and the health port, in a child process
at an open-file limit of 256 (``tests/support/slow_client_child.py``). Before, each
connection that sent half a request held a file (and on the health port a thread) without
end: past the limit the receiver could not accept LiveKit's next signed webhook, nor the
health port Kubernetes' probe. Now each must send its request in time, and the receiver
makes room for a new connection by dropping the oldest one still waiting for its headers."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest
from google.protobuf import json_format
from livekit.protocol import models as proto_models
from livekit.protocol import webhook as proto_webhook

from ringflow.agents.webhooks import WEBHOOK_PATH
from ringflow.simulation.livekit_fake_webhooks import sign_webhook
from tests.support.paths import ROOT
from tests.support.wfkit import wait_until

KEY, SECRET = "APIslow", "s" * 32
NOFILE = 256
SLOW = 600  # more than twice the child's open-file limit


@pytest.fixture
def child() -> Iterator[tuple[int, int]]:
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "tests.support.slow_client_child", "--nofile", str(NOFILE)),
            *("--api-key", KEY, "--api-secret", SECRET),
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    line = proc.stdout.readline().split()
    assert line[:1] == ["PORTS"], line
    try:
        yield int(line[1]), int(line[2])
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.asynccontextmanager
async def slow_connections(port: int, n: int, partial: bytes) -> AsyncIterator[int]:
    """``n`` connections that each send ``partial`` (half a request) and then nothing."""
    writers: list[asyncio.StreamWriter] = []

    async def one() -> None:
        with contextlib.suppress(OSError):
            _, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
            w.write(partial)
            writers.append(w)

    await asyncio.gather(*(one() for _ in range(n)))
    try:
        yield len(writers)
    finally:
        for w in writers:
            w.close()


def room_started() -> str:
    ev = proto_webhook.WebhookEvent(event="room_started", id="EV_slow", room=proto_models.Room(name="lobby"))
    return json_format.MessageToJson(ev)


async def test_a_signed_webhook_lands_through_many_slow_connections(child: tuple[int, int]) -> None:
    webhook_port, _ = child
    body = room_started()
    partial = b"POST " + WEBHOOK_PATH.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Len"
    async with slow_connections(webhook_port, SLOW, partial) as opened:
        assert opened > NOFILE  # the child could not have held them all
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
            resp = await http.post(
                f"http://127.0.0.1:{webhook_port}{WEBHOOK_PATH}",
                data=body,
                headers={
                    "Authorization": sign_webhook(body, KEY, SECRET),
                    "Content-Type": "application/webhook+json",
                },
            )
            assert (resp.status, await resp.text()) == (200, "ignored")
    # a body that never finishes is cut off too: the server closes the connection
    r, w = await asyncio.open_connection("127.0.0.1", webhook_port)
    w.write(b"POST " + WEBHOOK_PATH.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
    await w.drain()
    with contextlib.suppress(ConnectionResetError):
        await asyncio.wait_for(r.read(), 60)  # EOF: the read returns instead of hanging
    w.close()


async def test_the_health_port_answers_its_probe_through_many_idle_connections(
    child: tuple[int, int],
) -> None:
    _, health_port = child
    r, w = await asyncio.open_connection("127.0.0.1", health_port)
    w.write(b"GET /livez HTTP/1.1\r\n")  # and nothing more
    await w.drain()
    async with slow_connections(health_port, 100, b"GET /livez HTTP/1.1\r\n") as opened:
        assert opened > 0
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:

            async def probe() -> int | None:
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with http.get(f"http://127.0.0.1:{health_port}/livez") as resp:
                        return resp.status
                return None

            assert await wait_until(probe, timeout=60, what="/livez through idle connections") == 200
    # an idle connection is closed by the server: its thread does not wait for ever
    with contextlib.suppress(ConnectionResetError):
        await asyncio.wait_for(r.read(), 60)
    w.close()
