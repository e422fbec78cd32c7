"""Knowledge base bench: how fast a ``knowledge`` entry's search is, and how often it finds
the answer (issue 32, docs/knowledge.md).

Prints one JSON document (``_report.emit``). Metrics, each on SQLite (sqlite-vec, a file in
a temporary directory) and on PostgreSQL (pgvector on 127.0.0.1:5432, database ``test``, a
schema of its own dropped at the end), each entry naming its ``db``:

* ``kb_search``: the store's search of one knowledge base version of 10,000 chunks for a
  query vector, top 5 (``KbStore.search``: the vec0 KNN query on SQLite, the HNSW index with
  pgvector's iterative scan on PostgreSQL). Baseline: the brute-force scan of the same rows
  in the same database in the same run (``exact=True``: SQL computing every row's cosine
  distance, no index), the queries interleaved. Target: p99 under 50 ms. The chunks' vectors
  are random unit vectors around 200 topics (embedding 10,000 real passages would take the
  bench many minutes on this machine, and the search's cost does not depend on what the
  vectors mean); ``embed_p50``/``embed_p99`` beside it are what embedding a query with the
  MiniLM model costs on top (``RINGFLOW_KB_EMBEDDINGS=minilm``).
* ``recall_at_5``: the share of the labelled questions of ``bench/data/kb_labelled.json``
  (a caller's question and the fact that answers it, 33 questions over 32 facts, several
  facts close to each other) whose fact is among the first 5 passages, every text embedded
  with the real MiniLM model; reported as ``p50`` (= ``p99``: one figure), its baseline the
  brute-force scan's recall (what an exact search would find).

``RINGFLOW_BENCH_SHORT=1`` takes 100 queries a database, the full run 1,000.
Run: ``.venv/bin/python bench/kb.py``.
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _report import emit, percentile

from ringflow.activities.kb_embed import embedder_for
from ringflow.activities.kb_store import KbStore, Row, Version, open_store

SHORT = os.environ.get("RINGFLOW_BENCH_SHORT") == "1"
CHUNKS = 10_000
QUERIES = 100 if SHORT else 1000
DIM = 384
PG_DSN = os.environ.get("RINGFLOW_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
LABELLED = Path(__file__).parent / "data" / "kb_labelled.json"


def unit(v: list[float]) -> list[float]:
    n = sum(x * x for x in v) ** 0.5 or 1.0
    return [x / n for x in v]


def synthetic(rng: random.Random, n: int) -> tuple[list[Row], list[list[float]]]:
    """``n`` chunks around 200 topic centres, and query vectors near random topics."""
    centres = [unit([rng.gauss(0, 1) for _ in range(DIM)]) for _ in range(200)]

    def near(c: list[float], spread: float) -> list[float]:
        return unit([x + rng.gauss(0, spread) for x in c])

    rows = [Row("synthetic.md", i, f"passage {i}", near(centres[i % 200], 0.06)) for i in range(n)]
    queries = [near(rng.choice(centres), 0.08) for _ in range(QUERIES)]
    return rows, queries


def ms(ns: list[int], q: float) -> float:
    return round(percentile(ns, q) / 1e6, 3)


def latency(
    store: KbStore, db: str, rows: list[Row], queries: list[list[float]], embed: dict[str, float]
) -> dict[str, Any]:
    kb = f"bench_{uuid.uuid4().hex[:8]}"
    head = Version(kb, 1, "bench", DIM, time.time(), {}, len(rows))
    t0 = time.perf_counter()
    store.write_version(head, rows, None, [])
    load_s = time.perf_counter() - t0
    for q in queries[:10]:  # warm caches and the index's pages
        store.search(head, q, 5)
        store.search(head, q, 5, exact=True)
    fast: list[int] = []
    scan: list[int] = []
    cpu: list[int] = []  # this process's CPU time of each search: what the load does not inflate
    agree = 0
    for q in queries:  # interleaved: a slow patch of the machine hits both
        t, c = time.perf_counter_ns(), time.process_time_ns()
        hits = store.search(head, q, 5)
        fast.append(time.perf_counter_ns() - t)
        cpu.append(time.process_time_ns() - c)
        t = time.perf_counter_ns()
        exact = store.search(head, q, 5, exact=True)
        scan.append(time.perf_counter_ns() - t)
        agree += len({h.ordinal for h in hits} & {h.ordinal for h in exact})
    return {
        "name": "kb_search",
        "db": db,
        "unit": "ms",
        "p50": ms(fast, 50),
        "p99": ms(fast, 99),
        "baseline_p50": ms(scan, 50),
        "baseline_p99": ms(scan, 99),
        "ratio": round(percentile(fast, 50) / percentile(scan, 50), 3),
        "n": len(fast),
        "cpu_p50": ms(cpu, 50),  # SQLite: the whole search; PostgreSQL: the client's part only
        "cpu_p99": ms(cpu, 99),
        "chunks": len(rows),
        "top_k": 5,
        "overlap_with_scan": round(agree / (5 * len(queries)), 4),  # the index's own recall@5
        "load_s": round(load_s, 2),
        **embed,
    }


def recall(store: KbStore, db: str, embedder: Any) -> dict[str, Any]:
    data = json.loads(LABELLED.read_text())
    ids = list(data["facts"])
    vectors = embedder.embed([data["facts"][i] for i in ids])
    kb = f"bench_{uuid.uuid4().hex[:8]}"
    head = Version(kb, 1, embedder.name, DIM, time.time(), {}, len(ids))
    store.write_version(
        head,
        [Row(fid, n, data["facts"][fid], v) for n, (fid, v) in enumerate(zip(ids, vectors, strict=True))],
        None,
        [],
    )
    questions = data["questions"]
    qvecs = embedder.embed([q for q, _ in questions])
    found = sum(
        any(h.source == fid for h in store.search(head, v, 5))
        for (_, fid), v in zip(questions, qvecs, strict=True)
    )
    exact = sum(
        any(h.source == fid for h in store.search(head, v, 5, exact=True))
        for (_, fid), v in zip(questions, qvecs, strict=True)
    )
    r, b = found / len(questions), exact / len(questions)
    return {
        "name": "recall_at_5",
        "db": db,
        "unit": "share",
        "p50": round(r, 4),
        "p99": round(r, 4),
        "baseline_p50": round(b, 4),
        "ratio": round(r / b, 3) if b else None,
        "n": len(questions),
        "facts": len(ids),
    }


def main() -> None:
    rng = random.Random(32)
    rows, queries = synthetic(rng, CHUNKS)
    embedder = embedder_for("minilm")
    embedder.embed(["warm up"])
    texts = [f"What are the opening hours of desk {i}?" for i in range(50 if SHORT else 200)]
    embed_ns: list[int] = []
    embed_cpu: list[int] = []
    for t in texts:
        t0, c0 = time.perf_counter_ns(), time.process_time_ns()
        embedder.embed([t])
        embed_ns.append(time.perf_counter_ns() - t0)
        embed_cpu.append(time.process_time_ns() - c0)
    embed = {
        "embed_p50": ms(embed_ns, 50),
        "embed_p99": ms(embed_ns, 99),
        "embed_cpu_p50": ms(embed_cpu, 50),
        "embed_n": len(embed_ns),
    }
    metrics: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ringflow-kb-bench-") as tmp:
        sqlite = open_store(f"sqlite:///{tmp}/kb.db")
        metrics += [latency(sqlite, "sqlite", rows, queries, embed), recall(sqlite, "sqlite", embedder)]
        sqlite.close()
    import psycopg

    schema = f"kb_bench_{uuid.uuid4().hex[:8]}"
    admin = psycopg.connect(PG_DSN, autocommit=True)
    admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        pg = open_store(f"{PG_DSN}?options=-csearch_path%3D{schema}")
        metrics += [latency(pg, "postgres", rows, queries, embed), recall(pg, "postgres", embedder)]
        pg.close()
    finally:
        admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        admin.close()
    emit("kb", metrics)


if __name__ == "__main__":
    main()
