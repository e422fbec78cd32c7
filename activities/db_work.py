"""The stores' own threads for database work: bounded, and watched.

Database calls are blocking (SQLAlchemy over psycopg or sqlite3), so the activities run them
on threads. On the event loop's default executor they once shared its few threads (6 on
2 cores) with everything else, and as many half-open connections as it had threads stopped
every later database call of the worker, while its probes stayed green. Here the stores
have a pool of their own (``RINGFLOW_DATABASE_THREADS``), each call on it is bounded by the
driver's own deadline (``persistence.py``), and :meth:`DatabaseWork.oldest_s` tells
``/livez`` how long the oldest unfinished call has waited, so stuck database work shows.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
DEFAULT_THREADS = 8


class DatabaseWork:
    def __init__(self, threads: int = DEFAULT_THREADS) -> None:
        self.threads = threads
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="ringflow-db")
        self._lock = threading.Lock()
        self._since: dict[int, float] = {}  # submitted and not finished: since when
        self._ids = itertools.count()

    def resize(self, threads: int) -> None:
        """A pool of ``threads`` for work submitted from now on (the worker, at start)."""
        if threads == self.threads:
            return
        old, self._pool = (
            self._pool,
            ThreadPoolExecutor(max_workers=threads, thread_name_prefix="ringflow-db"),
        )
        self.threads = threads
        old.shutdown(wait=False)

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)`` on one of the stores' threads."""
        token = next(self._ids)
        with self._lock:
            self._since[token] = time.monotonic()
        future = self._pool.submit(fn, *args)
        # Done when the thread is (not when an awaiting activity gives up on it): a call stuck
        # past its activity's timeout still counts as stuck.
        future.add_done_callback(lambda _: self._finished(token))
        return await asyncio.wrap_future(future)

    def _finished(self, token: int) -> None:
        with self._lock:
            self._since.pop(token, None)

    def oldest_s(self) -> float:
        """Seconds the oldest unfinished call (running or queued) has waited; 0 when none."""
        with self._lock:
            first = min(self._since.values(), default=None)
        return 0.0 if first is None else time.monotonic() - first

    def pending(self) -> int:
        with self._lock:
            return len(self._since)


DB_WORK = DatabaseWork()
