"""The HTTP tool at its edges, against a loopback server: redirects with a body, the whole
request's deadline, decompression bombs, header injection, IPv6 addresses embedding IPv4."""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
import tracemalloc
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from ringflow.activities.http_tool import HTTP_TOOL_UNAVAILABLE, HttpTool, HttpToolRequest
from ringflow.activities.netguard import BlockedDestination, address_problem, vet_url

CAP = 16 * 1024
BOMB_BYTES = 64 * 1024 * 1024


def _bomb() -> bytes:
    """64 MiB of zeros, gzip-compressed to about 64 KiB."""
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1024 * 1024)
    return b"".join([*(z.compress(block) for _ in range(BOMB_BYTES // len(block))), z.flush()])


BOMB = _bomb()


@dataclass
class Server:
    base: str = ""
    port: int = 0
    seen: list[dict[str, Any]] = field(default_factory=list)


KEY = web.AppKey("server", Server)


async def _echo(request: web.Request) -> web.Response:
    body = await request.read()
    request.app[KEY].seen.append(
        {"path": request.path, "method": request.method, "body": body, "headers": dict(request.headers)}
    )
    return web.json_response(
        {
            "status": "found",
            "method": request.method,
            "accept_encoding": request.headers.get("Accept-Encoding"),
        }
    )


async def _away_307(request: web.Request) -> web.StreamResponse:
    request.app[KEY].seen.append({"path": request.path, "method": request.method})
    raise web.HTTPTemporaryRedirect(f"http://localhost:{request.app[KEY].port}/echo")


async def _same_307(request: web.Request) -> web.StreamResponse:
    raise web.HTTPTemporaryRedirect("/echo")


async def _drip(request: web.Request) -> web.StreamResponse:
    """Headers at once, then one byte every 0.2 s for 30 s: no single read ever times out."""
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    await resp.prepare(request)
    await resp.write(b'{"a": "')
    for _ in range(150):
        await asyncio.sleep(0.2)
        await resp.write(b"x")
    await resp.write(b'"}')
    return resp


async def _bomb_handler(request: web.Request) -> web.StreamResponse:
    """Chunked, so no Content-Length gives the size away before decompression."""
    resp = web.StreamResponse(headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})
    await resp.prepare(request)
    await resp.write(BOMB)
    await resp.write_eof()
    return resp


async def _gzip_ok(_request: web.Request) -> web.Response:
    return web.Response(
        body=gzip.compress(b'{"status": "zipped"}'),
        headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
    )


async def _raw_deflate(_request: web.Request) -> web.Response:
    z = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)  # raw deflate, as some servers send
    return web.Response(
        body=z.compress(b'{"status": "deflated"}') + z.flush(),
        headers={"Content-Encoding": "deflate", "Content-Type": "application/json"},
    )


async def _brotli(_request: web.Request) -> web.Response:
    return web.Response(body=b"\x0b\x02\x80{}\x03", headers={"Content-Encoding": "br"})


@pytest_asyncio.fixture
async def server() -> AsyncIterator[Server]:
    state = Server()
    app = web.Application()
    app[KEY] = state
    r = app.router
    r.add_route("*", "/echo", _echo)
    r.add_route("*", "/away-307", _away_307)
    r.add_route("*", "/same-307", _same_307)
    r.add_get("/drip", _drip)
    r.add_get("/bomb", _bomb_handler)
    r.add_get("/gzip", _gzip_ok)
    r.add_get("/deflate", _raw_deflate)
    r.add_get("/br", _brotli)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    state.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    state.base = f"http://127.0.0.1:{state.port}"
    try:
        yield state
    finally:
        await runner.cleanup()


TOOL = HttpTool(allow_private=True, max_response_bytes=CAP)


async def call(url: str, **kw: Any) -> dict[str, Any]:
    req = HttpToolRequest(call_id="call-1", seq=1, url=url, **kw)
    out: dict[str, Any] = await ActivityEnvironment().run(TOOL.http_tool, req)
    return out


async def test_a_cross_origin_307_does_not_resend_the_body(server: Server) -> None:
    out = await call(
        f"{server.base}/away-307", method="POST", body={"card": "4111"}, headers={"Authorization": "Bearer t"}
    )
    assert out["status"] == "error" and out["error"] == "redirect_refused"
    assert [s["path"] for s in server.seen] == ["/away-307"]  # /echo never got the body
    # within one origin a 307 keeps its method and body, as it should
    same = await call(f"{server.base}/same-307", method="POST", body={"a": 1})
    assert same["method"] == "POST" and server.seen[-1]["body"] == b'{"a":1}'


async def test_the_whole_request_is_bounded_by_timeout_s(server: Server) -> None:
    with pytest.raises(ApplicationError) as caught:
        await call(f"{server.base}/drip", timeout_s=1)
    assert caught.value.type == HTTP_TOOL_UNAVAILABLE and not caught.value.non_retryable
    assert "longer than 1 s" in str(caught.value)


async def test_a_gzip_bomb_stops_at_the_cap_while_decompressing(server: Server) -> None:
    tracemalloc.start()
    try:
        out = await call(f"{server.base}/bomb")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out["error"] == "response_too_large" and f"{CAP} bytes" in out["message"]
    # the compressed body is 64 KiB, the decompressed one 64 MiB: nowhere near it is held
    assert peak < 4 * 1024 * 1024, peak


async def test_compressed_answers_still_decode(server: Server) -> None:
    assert await call(f"{server.base}/gzip") == {"status": "zipped"}
    assert await call(f"{server.base}/deflate") == {"status": "deflated"}
    echoed = await call(f"{server.base}/echo")
    assert echoed["accept_encoding"] == "gzip, deflate"
    unsupported = await call(f"{server.base}/br")
    assert unsupported["error"] == "bad_encoding" and "br" in unsupported["message"]


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Company": "acme\r\nX-Admin: yes"},
        {"X-Company": "acme\nX-Admin: yes"},
        {"X-Company\r\nX-Admin": "yes"},
    ],
)
async def test_a_line_break_in_a_header_is_refused_without_sending_or_retrying(
    server: Server, headers: dict[str, str]
) -> None:
    out = await call(f"{server.base}/echo", headers=headers)  # no ApplicationError: nothing to retry
    assert out["status"] == "error" and out["error"] == "invalid_header"
    assert "acme" not in out["message"]  # the value (it may hold a secret) is not echoed
    assert server.seen == []


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("2002:0a00:0001::1", "6to4 address embedding a private IPv4 address"),
        ("2002:7f00:0001::1", "6to4 address embedding a loopback IPv4 address"),
        ("2002:a9fe:a9fe::1", "6to4 address embedding a link-local IPv4 address"),
        ("2002:c0a8:0101::", "6to4 address embedding a private IPv4 address"),
        ("2002:0808:0808::1", None),
        ("64:ff9b::a00:1", "reserved"),  # NAT64 and IPv4-compatible forms are reserved ranges
        ("::a00:1", "reserved"),
        ("::ffff:0:a00:1", "reserved"),  # IPv4-translated
        ("fec0::1", "site-local"),  # deprecated, but still routed inside some networks
    ],
)
def test_ipv6_addresses_embedding_private_ipv4_are_refused(address: str, problem: str | None) -> None:
    assert address_problem(ipaddress.ip_address(address)) == problem


async def test_vet_url_refuses_a_6to4_literal() -> None:
    with pytest.raises(BlockedDestination, match="6to4"):
        await vet_url("http://[2002:7f00:1::1]:8080/admin")
