"""``ringflow codec-server``: Temporal's Codec Server protocol over Ringflow's payload codec.

The Temporal UI and the ``temporal`` CLI (``--codec-endpoint``, ``--codec-auth``) POST
``{"payloads": [...]}`` (protobuf JSON) to ``<endpoint>/decode`` or ``/encode`` and show
what comes back, so ops read calls in clear while Temporal itself only ever stores
ciphertext. Only the last path segment selects the operation (the protocol lets a server be
mounted at any depth, e.g. ``/default/decode``). The browser calls it cross-origin, so
the UI's origin gets CORS headers; every caller needs a bearer token: the static one, or
(the Temporal UI, which forwards its user's) a JWT of the identity provider (codec_auth.py).

``/healthz`` names the key ids only to a caller with credentials. Without authentication
(``--no-auth``, ``ringflow dev``) the server answers only requests whose ``Host`` is a
loopback name, so a web page cannot reach it through a DNS name rebound to 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from aiohttp import hdrs, web
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from temporalio.api.common.v1 import Payload, Payloads

from ringflow.codec import CodecKeyError, EncryptionCodec
from ringflow.compression import refused_reason
from ringflow.servers.codec_auth import CodecAuth, OidcVerifier, Unauthorized
from ringflow.servers.codec_metrics import count_requests, metrics

MAX_BODY_BYTES = 8 * 1024 * 1024
ALLOWED_HEADERS = "Authorization, Content-Type, X-Namespace"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


def host_name(request: web.Request) -> str:
    """The ``Host`` header's name, without its port (``[::1]:8081`` is ``::1``)."""
    host = request.headers.get(hdrs.HOST, "")
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def build_app(
    codec: EncryptionCodec,
    *,
    token: str | None,
    cors_origins: Sequence[str],
    oidc: OidcVerifier | None = None,
) -> web.Application:
    """The aiohttp app; ``token=None`` and no ``oidc`` serves without authentication
    (``ringflow dev`` on loopback only, since the dev UI has no way to send a token). With
    ``oidc`` the Temporal UI's users are let in by their identity provider's JWT
    (codec_auth.py), the static ``token`` still serving the CLI."""
    auth = None if token is None and oidc is None else CodecAuth(tokens=[token] if token else [], oidc=oidc)
    origins = {o.strip().rstrip("/") for o in cors_origins if o.strip()}

    def cors(request: web.Request, resp: web.StreamResponse) -> web.StreamResponse:
        origin = request.headers.get(hdrs.ORIGIN, "")
        if origin in origins:
            resp.headers[hdrs.ACCESS_CONTROL_ALLOW_ORIGIN] = origin
            resp.headers[hdrs.ACCESS_CONTROL_ALLOW_METHODS] = "POST, OPTIONS"
            resp.headers[hdrs.ACCESS_CONTROL_ALLOW_HEADERS] = ALLOWED_HEADERS
            resp.headers[hdrs.ACCESS_CONTROL_ALLOW_CREDENTIALS] = "true"
            resp.headers[hdrs.VARY] = "Origin"
        return resp

    def error(request: web.Request, status: int, message: str) -> web.StreamResponse:
        return cors(request, web.json_response({"error": message}, status=status))

    async def refused(request: web.Request) -> str | None:
        if auth is None:
            return None
        try:
            await auth.check(request.headers.get(hdrs.AUTHORIZATION, ""))
        except Unauthorized as err:
            return str(err)
        return None

    async def has_credentials(request: web.Request) -> bool:
        return auth is not None and await refused(request) is None

    @web.middleware
    async def loopback_only(request: web.Request, handler: Handler) -> web.StreamResponse:
        if auth is None and host_name(request).lower() not in LOOPBACK_HOSTS:
            return web.json_response(
                {"error": "without a token this server answers only Host: localhost or 127.0.0.1"},
                status=403,
            )
        return await handler(request)

    async def handle(request: web.Request) -> web.StreamResponse:
        op = request.path.rstrip("/").rsplit("/", 1)[-1]
        if op not in ("encode", "decode"):
            return error(request, 404, "POST to .../encode or .../decode")
        if request.method == hdrs.METH_OPTIONS:  # CORS preflight carries no credentials
            return cors(request, web.Response())
        if request.method != hdrs.METH_POST:
            return error(request, 405, "POST only")
        why = await refused(request)
        if why is not None:
            return error(request, 401, why)
        try:
            body = await request.read()
            payloads = json_format.Parse(body, Payloads())
        except (json_format.ParseError, UnicodeDecodeError, ValueError) as err:
            return error(request, 400, f"body is not a Payloads JSON object: {err}")
        try:
            out: list[Payload] = (
                await codec.encode(payloads.payloads)
                if op == "encode"
                else await codec.decode(payloads.payloads)
            )
        except CodecKeyError as err:
            return error(request, 422, str(err))
        except (DecodeError, ValueError) as err:  # decrypted, but what it held is no payload
            return error(request, 400, f"a payload could not be decoded: {type(err).__name__}")
        # a compressed payload the codec would not inflate (a bomb, corrupt): said, not shown
        why_not = next((r for r in map(refused_reason, out) if r is not None), None)
        if op == "decode" and why_not is not None:
            return error(request, 422, why_not)
        text = json_format.MessageToJson(Payloads(payloads=out))
        return cors(request, web.Response(text=text, content_type="application/json"))

    async def health(request: web.Request) -> web.StreamResponse:
        if not await has_credentials(request):  # which keys exist is for operators, not any prober
            return web.json_response({"ok": True})
        return web.json_response({"ok": True, "keys": sorted(codec.keyring.keys) if codec.keyring else []})

    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[loopback_only, count_requests])
    app.router.add_get("/healthz", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


async def start(app: web.Application, host: str, port: int) -> web.AppRunner:
    """Serve ``app`` in the running loop (``ringflow dev`` runs it beside the worker)."""
    runner = web.AppRunner(app, access_log=None)  # request lines would be noise, bodies secret
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
