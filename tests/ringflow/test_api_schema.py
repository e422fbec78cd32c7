"""Schemathesis against ``/openapi.json`` of a real ``ringflow api`` process, on the test's
Temporal dev server and a SQLite database: no 5xx, every answer (status, content type,
body) as the document says, and every route refused without a key and without its scope.
Bounded: a few examples per operation (``RINGFLOW_SCHEMA_EXAMPLES``)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from ringflow.activities.persistence import dispose_engines
from ringflow.devstack import DevStack
from tests.support.apikit import api_process, new_key

EXAMPLES = int(os.environ.get("RINGFLOW_SCHEMA_EXAMPLES", "8"))


@pytest.fixture(scope="module")
def schema_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield f"sqlite:///{Path(tmp_path_factory.mktemp('api')) / 'ringflow.db'}"
    dispose_engines()


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def api_url(temporal_server: DevStack, schema_db: str) -> AsyncIterator[str]:
    async with api_process(temporal_server.address, schema_db, RINGFLOW_API_RATE_BURST="1000000") as url:
        yield url


@pytest.fixture(scope="module")
def api_key(schema_db: str) -> str:
    return new_key(schema_db)


def test_every_operation_answers_as_its_schema_says(api_url: str, api_key: str) -> None:
    """Each operation in turn (Schemathesis' own strategies; its pytest plugin needs a
    schema at collection time, which a server started by a fixture cannot give)."""
    schema = schemathesis.openapi.from_url(f"{api_url}/openapi.json")
    auth = {"Authorization": f"Bearer {api_key}"}
    ran = 0
    for result in schema.get_all_operations():
        operation = result.ok()

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def check(case: Any) -> None:
            # a schema-valid request may still name no flow, a missing call or a bad variable:
            # those are 4xx problems naming the field, which this check would call a rejection
            case.call_and_validate(headers=auth, excluded_checks=[positive_data_acceptance])

        check()
        ran += 1
    assert ran >= 15


def _operations(doc: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (
            method.upper(),
            path.replace("{call_id}", "x").replace("{campaign_id}", "x").replace("{journey_id}", "x"),
        )
        for path, ops in doc["paths"].items()
        for method in ops
    ]


def test_every_route_refuses_no_key_and_a_key_without_its_scope(api_url: str, schema_db: str) -> None:
    doc = httpx.get(f"{api_url}/openapi.json").json()
    assert doc["openapi"].startswith("3.1")
    only_flows = new_key(schema_db, "flows:read")
    only_webhooks = new_key(schema_db, "webhooks:write")
    ops = _operations(doc)
    assert len(ops) >= 15
    for method, path in ops:
        bare = httpx.request(method, f"{api_url}{path}")
        assert bare.status_code == 401, (method, path, bare.text)
        assert bare.headers["content-type"] == "application/problem+json"
        codes = {
            httpx.request(method, f"{api_url}{path}", headers={"Authorization": f"Bearer {k}"}).status_code
            for k in (only_flows, only_webhooks)
        }
        assert 403 in codes, (method, path, codes)
