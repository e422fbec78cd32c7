"""The HTTP API in the test's process, on the test's Temporal server and database: an
httpx client over ASGI (no port), and keys made as ``ringflow api-key create`` makes them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from temporalio.client import Client

from ringflow.api.app import create_app
from ringflow.api.keys import create_key
from ringflow.settings import Settings
from tests.support.wfkit import FIXTURES

ALL_SCOPES = [
    "calls:read",
    "calls:write",
    "campaigns:read",
    "campaigns:write",
    "flows:read",
    "webhooks:read",
    "webhooks:write",
]


def api_settings(database_url: str, task_queue: str, **extra: Any) -> Settings:
    return Settings(
        database_url=database_url,
        task_queue=task_queue,
        flows_dir=str(FIXTURES),
        encryption=False,
        **extra,
    )


def new_key(database_url: str, *scopes: str) -> str:
    return create_key(database_url, list(scopes or ALL_SCOPES), "test")[1]


@asynccontextmanager
async def api_client(
    settings: Settings, temporal: Client, key: str | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings, client=temporal)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api", headers=headers) as http:
        yield http
