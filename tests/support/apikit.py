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
from ringflow.api.models import SCOPES
from ringflow.settings import Settings
from tests.support.wfkit import FIXTURES

ALL_SCOPES = list(SCOPES)


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


@asynccontextmanager
async def api_process(temporal_address: str, database_url: str, **env: str) -> AsyncIterator[str]:
    """``ringflow api`` as a process on a free port, once it answers ``/livez``: its base URL.
    The real server the Schemathesis run and the browser tests talk to."""
    import asyncio
    import os
    import sys

    from ringflow.devstack import free_port
    from tests.support.paths import ROOT
    from tests.support.wfkit import wait_until

    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "ringflow.cli",
        "api",
        "--port",
        str(port),
        cwd=ROOT,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "RINGFLOW_TEMPORAL_ADDRESS": temporal_address,
            "RINGFLOW_DATABASE_URL": database_url,
            "RINGFLOW_FLOWS_DIR": str(FIXTURES),
            "RINGFLOW_LOG_LEVEL": "WARNING",
            **env,
        },
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"

    async def up() -> bool:
        if proc.returncode is not None:
            raise AssertionError(f"ringflow api exited with {proc.returncode}")
        try:
            async with httpx.AsyncClient() as http:
                return (await http.get(f"{url}/livez")).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        await wait_until(up, what="ringflow api to answer /livez")
        yield url
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()
