"""The HTTP tool against a local server: SSRF guard, idempotency key, size cap, outcomes."""

from __future__ import annotations

import ipaddress
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from ringflow.activities.http_tool import HTTP_TOOL_UNAVAILABLE, PRIVATE_ALLOWED, HttpTool, HttpToolRequest
from ringflow.activities.netguard import BlockedDestination, address_problem, allowed_networks, vet_url
from ringflow.activities.registry import build_activities
from ringflow.settings import Settings

BIG = 64 * 1024
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Api:
    base: str = ""
    port: int = 0
    seen: list[dict[str, Any]] = field(default_factory=list)


API_KEY = web.AppKey("api", Api)


async def _echo(request: web.Request) -> web.Response:
    api = request.app[API_KEY]
    body = await request.read()
    api.seen.append({"method": request.method, "headers": dict(request.headers), "body": body})
    return web.json_response(
        {
            "status": "found",
            "method": request.method,
            "idempotency_key": request.headers.get("Idempotency-Key"),
            "host": request.headers.get("Host"),
            "body": body.decode() or None,
        }
    )


async def _streamed_big(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse()  # chunked: no Content-Length to trust
    await resp.prepare(request)
    for _ in range(BIG // 1024):
        await resp.write(b"x" * 1024)
    await resp.write_eof()
    return resp


def _const(make: Callable[[], web.StreamResponse]) -> Handler:
    async def handler(_request: web.Request) -> web.StreamResponse:
        return make()

    return handler


def _redirect(exc: type[web.HTTPException], to: str) -> Handler:
    async def handler(_request: web.Request) -> web.StreamResponse:
        raise exc(to)  # type: ignore[call-arg]

    return handler


async def _away(request: web.Request) -> web.StreamResponse:
    """Redirect to the same server under another name (another origin)."""
    raise web.HTTPFound(f"http://localhost:{request.app[API_KEY].port}/echo")


def _routes(app: web.Application) -> None:
    r = app.router
    r.add_route("*", "/echo", _echo)
    r.add_get("/list", _const(lambda: web.json_response([1, 2, 3])))
    r.add_get("/text", _const(lambda: web.Response(text="<html>hi</html>", content_type="text/html")))
    r.add_get("/empty", _const(lambda: web.Response(status=204)))
    r.add_get("/big-declared", _const(lambda: web.Response(body=b"x" * BIG)))
    r.add_get("/big-streamed", _streamed_big)
    r.add_get("/missing", _const(lambda: web.json_response({"detail": "no such order"}, status=404)))
    r.add_get("/broken", _const(lambda: web.json_response({"detail": "db down"}, status=503)))
    r.add_route("*", "/moved", _redirect(web.HTTPSeeOther, "/echo"))
    r.add_get("/loop", _redirect(web.HTTPFound, "/loop"))
    r.add_get("/away", _away)


@pytest_asyncio.fixture
async def api() -> AsyncIterator[Api]:
    state = Api()
    app = web.Application()
    app[API_KEY] = state
    _routes(app)
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


async def call(tool: HttpTool, url: str, **kw: Any) -> dict[str, Any]:
    req = HttpToolRequest(call_id=kw.pop("call_id", "call-1"), seq=kw.pop("seq", 0), url=url, **kw)
    result: dict[str, Any] = await ActivityEnvironment().run(tool.http_tool, req)
    return result


OPEN = HttpTool(allow_private=True, max_response_bytes=16 * 1024)
GUARDED = HttpTool(allow_private=False)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/echo",
        "http://localhost:{port}/echo",
        "http://10.1.2.3/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]:{port}/echo",
        "http://[::ffff:127.0.0.1]:{port}/echo",
        "http://2130706433:{port}/echo",
        "file:///etc/passwd",
        "gopher://127.0.0.1/",
    ],
)
async def test_private_destinations_are_refused_without_the_flag(api: Api, url: str) -> None:
    result = await call(GUARDED, url.format(port=api.port))
    assert result["status"] == "error" and result["error"] == "blocked"
    assert api.seen == []


async def test_a_call_reaches_exactly_the_private_addresses_listed_for_it(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A simulated call's ``allow_private`` (``PRIVATE_ALLOWED``): only its own addresses,
    only for it; a refusal there says where the address could be listed."""
    monkeypatch.setitem(PRIVATE_ALLOWED, "sim-1", allowed_networks(["127.0.0.0/8"]))
    monkeypatch.setitem(PRIVATE_ALLOWED, "sim-2", allowed_networks(["10.0.0.0/8", "::1"]))
    ok = await call(GUARDED, f"{api.base}/echo", call_id="sim-1")
    assert ok["status"] == "found"
    refused = await call(GUARDED, f"{api.base}/echo", call_id="sim-2")
    assert refused["error"] == "blocked" and "the script's allow_private" in refused["message"]
    worker = await call(GUARDED, f"{api.base}/echo", call_id="call-1")  # not a simulated call
    assert worker["error"] == "blocked" and "allow_private" not in worker["message"]
    assert len(api.seen) == 1
    with pytest.raises(ValueError, match="'localhost' is not an IP address"):
        allowed_networks(["localhost"])


async def test_allowed_with_flag_and_idempotency_key(api: Api) -> None:
    result = await call(OPEN, f"{api.base}/echo", call_id="call-9", seq=4)
    assert result["status"] == "found"
    assert result["idempotency_key"] == "call-9:4"
    assert result["host"] == f"127.0.0.1:{api.port}"


async def test_name_is_pinned_to_vetted_address_but_host_header_kept(api: Api) -> None:
    result = await call(OPEN, f"http://localhost:{api.port}/echo", headers={"Host": "evil"})
    assert result["host"] == f"localhost:{api.port}"


async def test_post_json_body_and_user_headers(api: Api) -> None:
    result = await call(
        OPEN, f"{api.base}/echo", method="POST", body={"party": 4}, headers={"X-Api-Key": "k"}
    )
    assert result["method"] == "POST" and result["body"] == '{"party":4}'
    assert api.seen[0]["headers"]["X-Api-Key"] == "k"
    assert api.seen[0]["headers"]["Content-Type"] == "application/json"


@pytest.mark.parametrize("path", ["/big-declared", "/big-streamed"])
async def test_response_size_cap(api: Api, path: str) -> None:
    result = await call(OPEN, f"{api.base}{path}")
    assert result["error"] == "response_too_large"
    small = await call(OPEN, f"{api.base}{path}", max_response_bytes=1024)
    assert "1024 bytes" in small["message"]
    # a request may lower the worker's cap, never raise it
    still = await call(OPEN, f"{api.base}{path}", max_response_bytes=10 * BIG)
    assert still["error"] == "response_too_large"


async def test_client_errors_go_back_to_the_llm(api: Api) -> None:
    result = await call(OPEN, f"{api.base}/missing")
    assert result == {
        "status": "error",
        "error": "http_error",
        "message": "127.0.0.1 answered 404",
        "http_status": 404,
        "body": {"detail": "no such order"},
    }


async def test_server_errors_and_unreachable_hosts_raise_for_retry(api: Api, unused_tcp_port: int) -> None:
    for url in (f"{api.base}/broken", f"http://127.0.0.1:{unused_tcp_port}/"):
        with pytest.raises(ApplicationError) as caught:
            await call(OPEN, url)
        assert caught.value.type == HTTP_TOOL_UNAVAILABLE and not caught.value.non_retryable


async def test_result_shapes(api: Api) -> None:
    assert await call(OPEN, f"{api.base}/list") == {"result": [1, 2, 3]}
    assert await call(OPEN, f"{api.base}/empty") == {"status": "ok", "http_status": 204}
    text = await call(OPEN, f"{api.base}/text")
    assert text["error"] == "not_json" and text["text"] == "<html>hi</html>"


async def test_redirects_are_followed_and_revetted(api: Api) -> None:
    moved = await call(OPEN, f"{api.base}/moved", method="POST", body={"a": 1})
    assert moved["method"] == "GET" and moved["status"] == "found"
    away = await call(OPEN, f"{api.base}/away", method="get", headers={"X-Api-Key": "k"})
    assert away["host"] == f"localhost:{api.port}"
    assert "X-Api-Key" not in api.seen[-1]["headers"]  # not sent to another origin
    assert away["idempotency_key"] == "call-1:0"
    looping = await call(OPEN, f"{api.base}/loop")
    assert looping["error"] == "too_many_redirects"


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("127.0.0.1", "loopback"),
        ("10.0.0.1", "private"),
        ("192.168.1.1", "private"),
        ("172.16.0.1", "private"),
        ("169.254.169.254", "link-local"),
        ("224.0.0.1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("100.64.0.1", "non-global"),
        ("::1", "loopback"),
        ("fe80::1", "link-local"),
        ("fc00::1", "private"),
        ("::ffff:10.0.0.1", "private"),
        ("8.8.8.8", None),
        ("2606:4700:4700::1111", None),
    ],
)
def test_address_classification(address: str, problem: str | None) -> None:
    assert address_problem(ipaddress.ip_address(address)) == problem


async def test_vet_url_checks_every_address_and_the_scheme() -> None:
    target = await vet_url("https://8.8.8.8:8443/x?y=1")
    assert str(target.pinned_url(target.ips[0])) == "https://8.8.8.8:8443/x?y=1"
    assert target.host_header() == "8.8.8.8:8443"
    with pytest.raises(BlockedDestination):
        await vet_url("ftp://8.8.8.8/")
    with pytest.raises(BlockedDestination):
        await vet_url("not a url")


def test_registry_builds_all_activities_from_settings() -> None:
    settings = Settings(database_url="sqlite:///:memory:", http_allow_private=True)
    acts = build_activities(settings)
    names = [a.__temporal_activity_definition.name for a in acts]  # type: ignore[attr-defined]
    assert names == [
        "persist_call",
        "append_transcript",
        "post_call_webhook",
        "http_tool",
        "extract_variables",
        "analyze_call",
        "dispatch_agent",
        "prepare_call",
        "dial_call",
        "transfer_call",
        "hang_up_room",
        "start_recording",
        "stop_recording",
    ]


@pytest.fixture(scope="module")
def localhost_cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A throwaway certificate for the name ``localhost`` only (no IP address in it)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not available")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


async def test_https_verifies_the_original_name_while_connecting_to_the_vetted_ip(
    localhost_cert: tuple[Path, Path],
) -> None:
    cert, key = localhost_cert
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    app = web.Application()
    app[API_KEY] = Api()
    _routes(app)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ctx)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    tool = HttpTool(allow_private=True, verify=ssl.create_default_context(cafile=str(cert)))
    try:
        ok = await call(tool, f"https://localhost:{port}/echo")
        assert ok["status"] == "found" and ok["host"] == f"localhost:{port}"
        # the same server by address: the certificate does not name 127.0.0.1, so TLS fails
        with pytest.raises(ApplicationError) as caught:
            await call(tool, f"https://127.0.0.1:{port}/echo")
        assert caught.value.type == HTTP_TOOL_UNAVAILABLE
    finally:
        await runner.cleanup()
