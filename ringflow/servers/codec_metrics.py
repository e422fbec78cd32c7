"""The codec server's Prometheus metrics, served on its own ``/metrics``.

* ``ringflow_codec_requests_total{op, outcome}``: encode/decode requests by outcome
  (``ok``, ``unauthorized``, ``bad_request``, ``error``), so a UI that cannot decode (its
  users' tokens refused, the IdP's keys unreachable) shows on a graph and in an alert.
* ``ringflow_codec_request_seconds{op}``: how long they took (a JWKS fetch shows here).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, generate_latest

REQUESTS = Counter("ringflow_codec_requests", "Codec server requests by outcome.", ["op", "outcome"])
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SECONDS = Histogram("ringflow_codec_request_seconds", "Codec server request latency.", ["op"])


def _outcome(status: int) -> str:
    if status < 400:
        return "ok"
    if status in (401, 403):
        return "unauthorized"
    if status < 500:
        return "bad_request"
    return "error"


@web.middleware
async def count_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
    op = request.path.rstrip("/").rsplit("/", 1)[-1]
    if request.method != "POST" or op not in ("encode", "decode"):
        return await handler(request)
    started = time.perf_counter()
    try:
        resp = await handler(request)
    except web.HTTPException as exc:
        REQUESTS.labels(op, _outcome(exc.status)).inc()
        raise
    except Exception:
        REQUESTS.labels(op, "error").inc()
        raise
    finally:
        SECONDS.labels(op).observe(time.perf_counter() - started)
    REQUESTS.labels(op, _outcome(resp.status)).inc()
    return resp


async def metrics(_: web.Request) -> web.Response:
    return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})
