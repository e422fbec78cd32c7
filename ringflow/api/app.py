"""The ASGI app of ``ringflow api``.

FastAPI rather than Litestar: Ringflow's wire types are already pydantic v2 models
(``ringflow/contract``), and FastAPI writes its OpenAPI 3.1 document straight from them and
from the routes' signatures, with the security scheme and headers as declared; Litestar
would serve the same, but through its own DTO layer and msgspec-first conventions, with a
smaller ecosystem (Schemathesis, the test client) tried against it. Both run on Starlette
and uvicorn, which Ringflow's dependencies already bring.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from fastapi import FastAPI
from fastapi.responses import JSONResponse, RedirectResponse

from ringflow.api import (
    calls,
    campaigns,
    console,
    flows,
    functions,
    journeys,
    metrics,
    problems,
    recordings,
    supervisors,
    webhooks,
)
from ringflow.api.auth import RateLimiter

if TYPE_CHECKING:
    from temporalio.client import Client

    from ringflow.settings import Settings

DESCRIPTION = """Start, watch and steer Ringflow calls and campaigns.

Every route takes an API key, `Authorization: Bearer KEY` (`ringflow api-key create --scopes ...`),
holding the route's scope. Errors are RFC 9457 problem documents whose `errors` name each field
at fault. Every `POST` honours an `Idempotency-Key` header: a repeat gets the first answer.
"""


def create_app(settings: Settings, client: Client | None = None) -> FastAPI:
    """The API and console for ``settings``; ``client``, when given, is the Temporal client to
    use (tests share theirs), else one is connected on the first request that needs it."""
    from ringflow import __version__

    app = FastAPI(
        title="Ringflow API",
        version=__version__,
        description=DESCRIPTION,
        openapi_url="/openapi.json",
        docs_url="/docs",
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.client = client
    app.state.client_lock = asyncio.Lock()
    app.state.limiter = RateLimiter(settings.api_rate_per_s, settings.api_rate_burst)
    problems.install(app)
    problems.document(app)
    metrics.install(app)
    app.include_router(calls.router)
    app.include_router(supervisors.router)
    app.include_router(journeys.router)
    app.include_router(campaigns.router)
    app.include_router(flows.router)
    app.include_router(webhooks.router)
    app.include_router(functions.router)
    app.include_router(recordings.router)
    app.include_router(console.router)

    @app.get("/livez", include_in_schema=False)
    async def livez() -> JSONResponse:
        """Liveness: the process answers (Kubernetes restarts it otherwise)."""
        return JSONResponse({"ok": True})

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> JSONResponse:
        """Readiness: Temporal answers and the key table can be read."""
        from ringflow.api import keys
        from ringflow.api.temporal import connected

        try:
            await connected(app.state)
            await asyncio.to_thread(keys.list_keys, settings.database_url)
        except Exception as exc:
            return JSONResponse({"ok": False, "detail": str(exc)}, status_code=503)
        return JSONResponse({"ok": True})

    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse("/console/")

    return app
