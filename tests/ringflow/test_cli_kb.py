"""``ringflow kb ingest`` and ``kb search`` (docs/knowledge.md) on both databases: the
report, the passages, and clear errors (no traceback) for a flow without sources, a source
that cannot be read and a knowledge base never ingested."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ringflow.cli import app
from tests.support.kbkit import clinic_flow


@pytest.fixture
def flow(tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RINGFLOW_DATABASE_URL", database_url)
    monkeypatch.setenv("RINGFLOW_KB_EMBEDDINGS", "minilm")
    return clinic_flow(tmp_path, f"kb_cli_{uuid.uuid4().hex[:8]}")


def test_ingest_then_search(flow: Path) -> None:
    first = CliRunner().invoke(app, ["kb", "ingest", "--json", str(flow)])
    assert first.exit_code == 0, first.output
    report = json.loads(first.output)
    assert report["version"] == 1 and report["embedder"] == "minilm" and report["chunks"] >= 5
    assert set(report["embedded"]) == {"clinic.md", "prices.csv", "insurance.html", "dentures"}
    again = json.loads(CliRunner().invoke(app, ["kb", "ingest", "--json", str(flow)]).output)
    assert again["version"] == 1 and again["chunks"] == 0 and len(again["kept"]) == 4  # nothing changed
    found = CliRunner().invoke(
        app, ["kb", "search", "--json", "--top-k", "1", str(flow), "teeth whitening price"]
    )
    assert found.exit_code == 0, found.output
    (passage,) = json.loads(found.output)["passages"]
    assert passage["source"] == "prices.csv" and "300 dollars" in passage["text"]
    text = CliRunner().invoke(app, ["kb", "search", str(flow), "Do you take Aetna?"])
    assert text.exit_code == 0 and "[insurance.html#0]" in text.output


def test_errors_name_what_and_where(flow: Path) -> None:
    (flow.parent / "prices.csv").unlink()
    missing = CliRunner().invoke(app, ["kb", "ingest", str(flow)])
    assert missing.exit_code == 1 and "prices.csv" in missing.output and "Traceback" not in missing.output
    plain = flow.parent / "plain.yaml"
    plain.write_text("flow: plain\nnodes:\n  bye: {type: end, task: Say goodbye.}\n")
    none = CliRunner().invoke(app, ["kb", "ingest", str(plain)])
    assert none.exit_code == 2 and "lists no knowledge sources" in none.output
    never = CliRunner().invoke(app, ["kb", "search", "kb_never_ingested", "hello"])
    assert never.exit_code == 1 and "run `ringflow kb ingest`" in never.output
