"""The API's Prometheus metrics, on its own ``/metrics`` (no key: scraped like every
component, and it names routes and status codes only, never a key, a call id or a body).

* ``ringflow_api_requests_total{route, method, status}``: requests by the route's template
  (``/v1/calls/{call_id}``, not the path, so a label never carries an id);
* ``ringflow_api_request_seconds{route, method}``: how long they took.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, generate_latest

REQUESTS = Counter(
    "ringflow_api_requests", "API requests by route and status.", ["route", "method", "status"]
)
SECONDS = Histogram("ringflow_api_request_seconds", "API request latency.", ["route", "method"])


def _route(request: Request) -> str:
    route = request.scope.get("route")
    return getattr(route, "path", None) or "unmatched"


def install(app: FastAPI) -> None:
    """Count every request by its route template, and serve ``/metrics``."""

    @app.middleware("http")
    async def count(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        started = time.perf_counter()
        status = 500
        try:
            response = await call_next(request)
            status = response.status_code
            return response
        finally:
            route = _route(request)
            if route != "/metrics":
                REQUESTS.labels(route, request.method, str(status)).inc()
                SECONDS.labels(route, request.method).observe(time.perf_counter() - started)

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
