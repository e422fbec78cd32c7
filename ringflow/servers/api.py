"""``ringflow api``: the HTTP API and console under uvicorn, until SIGTERM or SIGINT.

Stateless: keys and idempotency records are in the database, calls in Temporal, so any
number of replicas serve the same API (the rate limit is per replica).
"""

from __future__ import annotations

from ringflow.settings import Settings


def serve(settings: Settings, host: str, port: int) -> None:
    import uvicorn

    from ringflow.api.app import create_app

    config = uvicorn.Config(
        create_app(settings),
        host=host,
        port=port,
        log_level=settings.log_level.lower(),
        access_log=True,  # method, path, status: the Authorization header is never logged
        proxy_headers=True,
        server_header=False,
    )
    uvicorn.Server(config).run()
