"""The API's /metrics: requests counted by route template (never a call id) and status."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from ringflow.api.app import create_app
from ringflow.settings import Settings


def test_requests_are_counted_by_route_template_and_status(tmp_path: Path) -> None:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path}/api.db", data_dir=tmp_path))
    with TestClient(app) as http:
        assert http.get("/v1/calls/call-secret-id-123").status_code == 401  # no key
        text = http.get("/metrics").text
    lines = [line for line in text.splitlines() if line.startswith("ringflow_api_requests_total{")]
    assert any('route="/v1/calls/{call_id}"' in line and 'status="401"' in line for line in lines), lines
    assert "call-secret-id-123" not in text
