"""Knowledge bases on both real databases: SQLite with sqlite-vec, PostgreSQL with pgvector.

The clinic's four documents (Markdown, CSV, HTML, PDF) are ingested with the real MiniLM
model, then searched as a ``knowledge`` entry would search them: the passage holding the
answer comes first and cites its source, re-ingesting writes a new version atomically (an
unchanged source is copied, not embedded again), and a call keeps the version it started with.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringflow.activities.kb_embed import embedder_for
from ringflow.activities.kb_ingest import ingest
from ringflow.activities.kb_search import KbSearcher, KbSearchRequest
from ringflow.activities.kb_store import KbStore, Row, Version, open_store, pick_version
from ringflow.callflow.loader import load_flow
from tests.support.kbkit import clinic_flow


@pytest.fixture
def kb() -> str:
    """A knowledge base name of its own: the PostgreSQL schema is shared by the run's tests."""
    return f"kb_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def store(database_url: str) -> Iterator[KbStore]:
    s = open_store(database_url)
    yield s
    s.close()


def run_ingest(path: Path, store: KbStore) -> object:
    flow = load_flow(path).flow
    return asyncio.run(ingest(flow, path.parent, store, embedder_for("minilm")))


def search(url: str, kb: str, query: str, **kw: object) -> dict[str, object]:
    return KbSearcher(url).search(KbSearchRequest(call_id="c1", kb=kb, query=query, **kw))  # type: ignore[arg-type]


QUESTIONS = {
    "When are you open on weekdays?": ("clinic.md", "eight in the morning"),
    "How much does teeth whitening cost?": ("prices.csv", "300 dollars"),
    "Do you take Aetna insurance?": ("insurance.html", "Aetna"),
    "How long does a denture repair take?": ("dentures", "three working days"),
    "Is there a fee if I cancel late?": ("clinic.md", "forty dollar fee"),
}


def test_every_document_type_is_found_by_the_question_it_answers(
    tmp_path: Path, database_url: str, store: KbStore, kb: str
) -> None:
    path = clinic_flow(tmp_path, kb)
    report = run_ingest(path, store)
    assert report.version == 1 and report.chunks >= 5  # type: ignore[attr-defined]
    for question, (source, fact) in QUESTIONS.items():
        out = search(database_url, kb, question, top_k=2)
        assert out["status"] == "ok", out
        first = out["passages"][0]  # type: ignore[index]
        assert first["source"] == source and fact in first["text"], (question, out["passages"])
    scripts = search(database_url, kb, "secret variable", top_k=20)
    assert not any("do not index" in p["text"] for p in scripts["passages"])  # type: ignore[union-attr]


def test_results_are_bounded_by_top_k_and_bytes(
    tmp_path: Path, database_url: str, store: KbStore, kb: str
) -> None:
    run_ingest(clinic_flow(tmp_path, kb), store)
    out = search(database_url, kb, "parking", top_k=1)
    assert len(out["passages"]) == 1  # type: ignore[arg-type]
    out = search(database_url, kb, "opening hours and parking", top_k=10, max_bytes=200)
    assert sum(len(p["text"].encode()) for p in out["passages"]) <= 200  # type: ignore[union-attr]
    assert out["passages"]


def test_reingesting_writes_a_new_version_and_a_call_keeps_its_own(
    tmp_path: Path, database_url: str, store: KbStore, kb: str
) -> None:
    path = clinic_flow(tmp_path, kb)
    run_ingest(path, store)
    first = store.pick(kb, None)
    assert first is not None
    started = first.ingested_at  # a call that started on version 1
    (tmp_path / "clinic.md").write_text("# Opening hours\n\nThe clinic now opens at seven in the morning.\n")
    report = run_ingest(path, store)
    assert report.version == 2  # type: ignore[attr-defined]
    assert report.embedded == ["clinic.md"]  # type: ignore[attr-defined]
    assert set(report.kept) == {"prices.csv", "insurance.html", "dentures"}  # type: ignore[attr-defined]
    new = search(database_url, kb, "What time do you open?", top_k=1)
    assert new["version"] == 2 and "seven" in new["passages"][0]["text"]  # type: ignore[index]
    old = search(database_url, kb, "What time do you open?", top_k=1, as_of=started)
    assert old["version"] == 1 and "eight" in old["passages"][0]["text"]  # type: ignore[index]
    # the kept sources were copied into version 2
    whitening = search(database_url, kb, "teeth whitening price", top_k=1)
    assert whitening["passages"][0]["source"] == "prices.csv"  # type: ignore[index]


def test_a_version_that_fails_to_write_leaves_the_previous_one(
    tmp_path: Path, database_url: str, store: KbStore, kb: str
) -> None:
    run_ingest(clinic_flow(tmp_path, kb), store)
    before = store.pick(kb, None)
    assert before is not None
    head = Version(kb, 2, "minilm", 384, time.time(), {}, 2)
    good = Row("x.md", 0, "a fine row", [1.0] + [0.0] * 383)
    bad = Row("x.md", 1, "a row of the wrong width", [1.0, 0.0])
    with pytest.raises(Exception):  # noqa: B017 - each database names its own error
        store.write_version(head, [good, bad], None, [])
    assert [v.version for v in store.versions(kb)] == [1]
    assert search(database_url, kb, "parking")["version"] == 1


def test_an_empty_or_foreign_knowledge_base_is_an_answer_not_a_failure(
    tmp_path: Path, database_url: str, store: KbStore, kb: str
) -> None:
    out = search(database_url, kb + "_none", "anything")
    assert out["status"] == "error" and "kb ingest" in str(out["error"])
    store.write_version(
        Version(kb, 1, "openai:text-embedding-3-small", 3, 1.0, {}, 1),
        [Row("a", 0, "t", [1.0, 0.0, 0.0])],
        None,
        [],
    )
    out = search(database_url, kb, "anything")
    assert out["status"] == "error" and "ingest it again" in str(out["error"])


def test_old_versions_are_pruned_once_no_call_can_hold_them(
    tmp_path: Path, database_url: str, store: KbStore, kb: str
) -> None:
    row = Row("a.md", 0, "text", [1.0] + [0.0] * 383)
    for n, at in ((1, 100.0), (2, 200.0), (3, 10_000.0)):
        store.write_version(Version(kb, n, "minilm", 384, at, {}, 1), [row], None, [])
    assert store.prune(kb, now=10_050.0, retain_s=1000.0) == [1]
    assert [v.version for v in store.versions(kb)] == [2, 3]


def test_a_call_picks_the_version_newest_at_its_start() -> None:
    vs = [Version("k", n, "minilm", 3, at, {}, 1) for n, at in ((1, 10.0), (2, 20.0), (3, 30.0))]
    assert pick_version(vs, None).version == 3  # type: ignore[union-attr]
    assert pick_version(vs, 25.0).version == 2  # type: ignore[union-attr]
    assert pick_version(vs, 5.0).version == 1  # type: ignore[union-attr]  # before the first: the oldest
    assert pick_version([], 5.0) is None
