"""Health endpoints for Kubernetes probes: ``/livez`` and ``/readyz``.

The SDK's Prometheus endpoint is served by Temporal's Rust core, which keeps answering
while Python is hung, so probing ``/metrics`` proves nothing about the worker. Here a
task on the worker's event loop stamps the time every ``tick_s``; the HTTP server runs on
its own thread, so when the loop is stuck it still answers, with 503 on ``/livez``
(instead of hanging until the probe times out). ``/livez`` also fails while ``stuck()``
names a reason (the worker's: database work waiting past ``RINGFLOW_DATABASE_STUCK_S``,
which no restart of the loop would show). ``/readyz`` is 200 only while the Temporal worker
runs (its namespace check passed and its pollers started) and no shutdown was asked for, so
a terminating pod leaves the Service at once.

The port serves probes, not clients: each connection gets ``READ_TIMEOUT_S`` to send its
request, and past ``MAX_CONNECTIONS`` open at once a new one is closed unanswered, so idle
or slow connections cannot hold a thread (and a file) each without end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

READ_TIMEOUT_S = 5.0
MAX_CONNECTIONS = 32


class _BoundedServer(ThreadingHTTPServer):
    """At most ``MAX_CONNECTIONS`` handler threads; a connection past them is closed."""

    daemon_threads = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class HealthServer:
    """``/livez`` (event loop alive) and ``/readyz`` (``ready()`` is true) on ``host:port``."""

    def __init__(
        self,
        host: str,
        port: int,
        ready: Callable[[], bool],
        *,
        stale_after_s: float = 10.0,
        tick_s: float = 1.0,
        stuck: Callable[[], str | None] | None = None,
    ) -> None:
        self.ready = ready
        self.stuck = stuck
        self.stale_after_s = stale_after_s
        self.tick_s = tick_s
        self._last_tick = time.monotonic()
        self._ticker: asyncio.Task[None] | None = None
        self._httpd = _BoundedServer((host, port), self._handler_class())
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="ringflow-health", daemon=True)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def loop_lag(self) -> float:
        """Seconds since the event loop last ran the ticker."""
        return time.monotonic() - self._last_tick

    def stuck_reason(self) -> str | None:
        if self.stuck is None:
            return None
        try:
            return self.stuck()
        except Exception as exc:
            return f"the liveness check failed: {type(exc).__name__}"

    def alive(self) -> bool:
        return self.loop_lag() < self.stale_after_s and self.stuck_reason() is None

    async def start(self) -> None:
        """Start ticking on the running loop and serving on a thread."""
        self._last_tick = time.monotonic()
        self._ticker = asyncio.create_task(self._tick(), name="ringflow-health-tick")
        self._thread.start()

    async def _tick(self) -> None:
        while True:
            self._last_tick = time.monotonic()
            await asyncio.sleep(self.tick_s)

    def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        if self._thread.is_alive():
            self._httpd.shutdown()
        self._httpd.server_close()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        health = self

        class Handler(BaseHTTPRequestHandler):
            timeout = READ_TIMEOUT_S  # the socket's: a request line or header slower than this ends it

            def do_GET(self) -> None:
                if self.path == "/livez":
                    ok = health.alive()
                    body: dict[str, Any] = {"alive": ok, "loop_lag_s": round(health.loop_lag(), 3)}
                    if (reason := health.stuck_reason()) is not None:
                        body["stuck"] = reason
                elif self.path == "/readyz":
                    ok = health.alive() and _safe(health.ready)
                    body = {"ready": ok}
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200 if ok else 503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:  # probes every few seconds: no noise
                return

        return Handler


def _safe(check: Callable[[], bool]) -> bool:
    with contextlib.suppress(Exception):
        return bool(check())
    return False
