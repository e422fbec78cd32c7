"""Who may call a route: a Bearer API key (``keys.py``) holding the route's scope, within its
rate limit. The key itself is never logged nor kept in memory past the check."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ringflow.api import keys
from ringflow.api.problems import ProblemError

bearer = HTTPBearer(auto_error=False, description="An API key from `ringflow api-key create`.")


@dataclass
class _Bucket:
    tokens: float
    at: float


class RateLimiter:
    """A token bucket per API key: ``rate`` requests a second sustained, ``burst`` at once.
    Per process: N replicas allow N times the rate (the HPA's replicas are few)."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = burst
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def take(self, key_id: str) -> float:
        """0 when the request may go; otherwise the seconds until it may."""
        now = time.monotonic()
        with self._lock:
            b = self._buckets.setdefault(key_id, _Bucket(float(self.burst), now))
            b.tokens = min(float(self.burst), b.tokens + (now - b.at) * self.rate)
            b.at = now
            if b.tokens >= 1:
                b.tokens -= 1
                return 0.0
            return (1 - b.tokens) / self.rate


def require(scope: str) -> Callable[..., Awaitable[keys.KeyInfo]]:
    """A dependency: the request's key, which holds ``scope``; 401, 403 or 429 otherwise."""

    async def check(
        request: Request, creds: HTTPAuthorizationCredentials | None = Depends(bearer)
    ) -> keys.KeyInfo:
        challenge = {"WWW-Authenticate": f'Bearer scope="{scope}"'}
        if creds is None or creds.scheme.lower() != "bearer":
            raise ProblemError(401, "an API key is required: `Authorization: Bearer KEY`", headers=challenge)
        database_url: str = request.app.state.settings.database_url
        info = await asyncio.to_thread(keys.verify, database_url, creds.credentials)
        if info is None:
            raise ProblemError(401, "the API key is unknown or revoked", headers=challenge)
        wait = request.app.state.limiter.take(info.id)
        if wait > 0:
            raise ProblemError(
                429,
                f"rate limit of {request.app.state.limiter.rate:g} requests/s for this key",
                headers={"Retry-After": str(max(1, math.ceil(wait)))},
            )
        if scope not in info.scopes:
            raise ProblemError(403, f"the API key lacks the scope '{scope}'", headers=challenge)
        return info

    return check
