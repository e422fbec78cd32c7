"""``Idempotency-Key`` on every ``POST``: the first answer is stored (``keys.py``) and given
again to a repeat of the same request; the same key on a different request is refused."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Header, Request
from fastapi.responses import JSONResponse

from ringflow.api import keys
from ringflow.api.problems import ProblemError, field

IdempotencyKey = Header(
    None,
    alias="Idempotency-Key",
    min_length=1,
    max_length=255,
    description="Repeat a POST with the same key to get its first answer again, never a second effect.",
)


def derived_id(key: keys.KeyInfo, idem_key: str) -> str:
    """An id fixed by the API key and the Idempotency-Key: a call started under it gets this id,
    so two racing repeats meet at Temporal's one-workflow-per-id rule, not two calls."""
    return hashlib.sha256(f"{key.id}:{idem_key}".encode()).hexdigest()[:16]


async def once(
    request: Request,
    key: keys.KeyInfo,
    idem_key: str | None,
    body: Any,
    make: Callable[[], Awaitable[tuple[int, Any]]],
) -> JSONResponse:
    """The answer of ``make()``, or the one stored for ``idem_key``."""
    if idem_key is None:
        status, answer = await make()
        return JSONResponse(answer, status_code=status)
    db = request.app.state.settings.database_url
    fp = keys.fingerprint(request.method, request.url.path, body)
    seen = await asyncio.to_thread(keys.recall, db, key.id, idem_key)
    if seen is None:
        status, answer = await make()
        if status >= 500:  # not an answer to keep: a retry may succeed
            return JSONResponse(answer, status_code=status)
        seen = await asyncio.to_thread(keys.remember, db, key.id, idem_key, fp, status, answer)
        if seen.fingerprint == fp and seen.status == status and seen.body == answer:
            return JSONResponse(answer, status_code=status)
    if seen.fingerprint != fp:
        raise ProblemError(
            422,
            "this Idempotency-Key was used for a different request",
            errors=[field("header.Idempotency-Key", "already used with another method, path or body")],
        )
    return JSONResponse(seen.body, status_code=seen.status, headers={"Idempotent-Replayed": "true"})
