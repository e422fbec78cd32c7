"""Shared fixtures: a real Temporal dev server, clients, and real databases.

The Temporal server is started once per session (it takes well under a second on SQLite)
on free ports with its own data directory, so tests never touch a developer's
``.ringflow`` folder or a server on 7233.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
import pytest_asyncio
from aiohttp import web
from temporalio.client import Client

from ringflow.activities.persistence import dispose_engines
from ringflow.codec import generate_key
from ringflow.devstack import DevStack, free_port
from ringflow.simulation.livekit_fake import FakeLiveKit
from ringflow.simulation.scripted_llm import ScriptedLLM
from ringflow.temporal_setup import connect
from tests.support.blobkit import AzureServer, GcsServer, azurite, azurite_command, gcs_server
from tests.support.loopback import Receiver, serve_app
from tests.support.mcpkit import Server, serving
from tests.support.s3kit import S3Server, s3_server
from tests.support.wfkit import running_worker

POSTGRES_ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/test"

# Tests never reach a real LLM: anything not pointed at a scripted endpoint fails fast
# (connection refused on the discard port) instead of waiting on DNS.
os.environ.setdefault("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
os.environ.setdefault("OPENAI_API_KEY", "test-key-not-secret")
# Every test's clients and workers (and their subprocesses) encrypt payloads, as production
# does; the key is made for this run only.
os.environ.setdefault("RINGFLOW_CODEC_KEYS", f"test-run:{generate_key()}")
# The data directory (a dev stack's key, the default SQLite file) is per user: the tests and
# their subprocesses keep theirs apart from the developer's.
os.environ.setdefault("RINGFLOW_DATA_DIR", tempfile.mkdtemp(prefix="ringflow-test-data-"))


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[DevStack]:
    """A running dev server: ``.address``, ``.ui_address``, ``.data_dir``, ``stop()`` and
    ``await start()`` (same ports, same SQLite file) for restart tests."""
    stack = DevStack(
        port=free_port(),
        ui_port=free_port(),
        data_dir=tmp_path_factory.mktemp("temporal"),
    )
    await stack.start()
    try:
        yield stack
    finally:
        stack.stop()


@pytest_asyncio.fixture
async def temporal_client(temporal_server: DevStack) -> Client:
    """A client on the dev server with the pydantic data converter. Function-scoped, so a
    test that restarted the server gets a fresh connection."""
    if not temporal_server.running:
        await temporal_server.start()
    return await connect(temporal_server.address, temporal_server.namespace)


@pytest.fixture
def task_queue() -> str:
    """A task queue no other test polls."""
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def sqlite_url(tmp_path: Path) -> Iterator[str]:
    yield f"sqlite:///{tmp_path / 'ringflow.db'}"


@pytest.fixture
def cli_env(
    monkeypatch: pytest.MonkeyPatch, temporal_server: DevStack, sqlite_url: str, task_queue: str
) -> None:
    """The CLI, run in this process, talks to the dev server, the test's database and its
    task queue."""
    monkeypatch.setenv("RINGFLOW_TEMPORAL_ADDRESS", temporal_server.address)
    monkeypatch.setenv("RINGFLOW_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("RINGFLOW_TASK_QUEUE", task_queue)
    dispose_engines()


@pytest.fixture(scope="session")
def postgres_schema() -> Iterator[str]:
    """A schema of its own for this test run, dropped at the end; skips without a server."""
    schema = f"rf_test_{uuid.uuid4().hex[:10]}"
    try:
        conn = psycopg.connect(POSTGRES_ADMIN_DSN, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as err:
        pytest.skip(f"PostgreSQL not reachable at {POSTGRES_ADMIN_DSN}: {err}")
    with conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        try:
            yield schema
        finally:
            dispose_engines()
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
def postgres_url(postgres_schema: str) -> Iterator[str]:
    """A database URL whose tables land in the run's private schema (via search_path)."""
    yield f"{POSTGRES_ADMIN_DSN}?options=-csearch_path%3D{postgres_schema}"
    dispose_engines()


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest) -> str:
    """Each persistence test runs on SQLite and on PostgreSQL."""
    return str(request.getfixturevalue(f"{request.param}_url"))


# --- Shared by modules in several folders ----------------------------------------------
# A module that needs the same name wired differently overrides it locally and, where it
# builds on this one, asks for it by the same name (pytest hands it the outer fixture).


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def scripted_llm() -> AsyncIterator[ScriptedLLM]:
    """One scripted endpoint for the whole run (starting one per test costs time); calls
    never see each other's replies because each has its own lane."""
    async with ScriptedLLM() as llm:
        yield llm


@pytest_asyncio.fixture
async def llm() -> AsyncIterator[ScriptedLLM]:
    """A scripted endpoint of the test's own, for tests that read or reset all of it."""
    async with ScriptedLLM() as scripted:
        yield scripted


@pytest_asyncio.fixture
async def worker(temporal_client: Client, task_queue: str, sqlite_url: str) -> AsyncIterator[None]:
    """The call's activities (handlers, persistence) run in this process, on a private queue."""
    async with running_worker(temporal_client, task_queue, sqlite_url):
        yield


@pytest_asyncio.fixture
async def lk() -> AsyncIterator[FakeLiveKit]:
    """The LiveKit protocol fake on loopback (rooms, dispatch, SIP, webhooks)."""
    async with FakeLiveKit() as fake:
        yield fake


@pytest_asyncio.fixture
async def receiver() -> AsyncIterator[Receiver]:
    """A webhook endpoint at ``receiver.url`` answering from ``receiver.script``, then 200."""
    rec = Receiver()
    app = web.Application()
    app.router.add_post("/hook", rec.handle)
    async with serve_app(app) as url:
        rec.url = f"{url}/hook"
        yield rec


@pytest.fixture(scope="module")
def mcp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``tests/support/mcp_server.py`` on a free port, one per module that asks."""
    with serving(tmp_path_factory.mktemp("mcp") / "calls.jsonl") as server:
        yield server


@pytest.fixture(scope="session")
def gcs() -> Iterator[GcsServer]:
    """A real GCS API (gcp-storage-emulator, in memory) for the whole run."""
    with gcs_server() as server:
        yield server


@pytest.fixture(scope="session")
def azure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzureServer]:
    """Azurite's blob server for the whole run; skipped, saying so, where it is not installed."""
    command = azurite_command()
    if command is None:
        pytest.skip("Azurite is not installed: npm install --prefix .ci/azurite azurite (bash .ci/run does)")
    with azurite(command, tmp_path_factory.mktemp("azurite")) as server:
        yield server


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    """A real S3-compatible server (moto's server mode) for the whole run; tests make their
    own buckets."""
    with s3_server() as server:
        yield server
