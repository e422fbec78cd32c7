"""Where knowledge bases live: the call records' database (``RINGFLOW_DATABASE_URL``).

- SQLite (development): a ``vec0`` table of sqlite-vec per vector width, one partition per
  knowledge base version, so a search scans only its own version's vectors (an exact
  search, in C). The interpreter's own ``sqlite3`` may be built without extension loading,
  so the store uses apsw, which carries its own SQLite and loads extensions.
- PostgreSQL (production): pgvector's ``vector(N)`` column with an HNSW index on cosine
  distance, searched with pgvector's iterative scan so a filter on the version still finds
  ``k`` rows.

A knowledge base is named after its flow and has versions: each ``ringflow kb ingest``
writes a whole new version (unchanged sources' rows are copied, not embedded again) and
its ``kb_versions`` row in one transaction, so a search sees the old version or the new one,
never a mix. A call searches the version that was newest when it started (``as_of``), so
its answers do not change under it; versions superseded more than ``RETAIN_S`` ago are
deleted at the next ingest.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy.engine import make_url

RETAIN_S = 7 * 86400.0  # longer than any call: a call keeps its version to its end


@dataclass(frozen=True)
class Version:
    kb: str
    version: int
    embedder: str
    dim: int
    ingested_at: float
    sources: dict[str, dict[str, Any]]  # label -> {sha256: of its bytes, chunks: how many}
    chunks: int


@dataclass(frozen=True)
class Hit:
    source: str
    ordinal: int
    text: str
    distance: float  # cosine distance: 0 the same direction, 2 the opposite


@dataclass(frozen=True)
class Row:
    source: str
    ordinal: int
    text: str
    embedding: Sequence[float]


class KbStoreError(RuntimeError):
    """The database cannot hold a knowledge base (no pgvector, no sqlite-vec)."""


class KbStore(Protocol):
    def versions(self, kb: str) -> list[Version]: ...

    def pick(self, kb: str, as_of: float | None) -> Version | None: ...

    def write_version(
        self, head: Version, rows: Iterable[Row], copy_from: int | None, copied: list[str]
    ) -> None: ...

    def search(self, v: Version, vector: Sequence[float], k: int, exact: bool = False) -> list[Hit]: ...

    def prune(self, kb: str, now: float, retain_s: float = RETAIN_S) -> list[int]: ...

    def close(self) -> None: ...


def _vec_text(vector: Sequence[float]) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in vector) + "]"


def _version(row: Sequence[Any]) -> Version:
    kb, version, embedder, dim, at, sources, chunks = row
    return Version(kb, int(version), embedder, int(dim), float(at), json.loads(sources), int(chunks))


def pick_version(versions: list[Version], as_of: float | None) -> Version | None:
    """The newest version ingested by ``as_of`` (a call's start); a call that started before
    the first ingest gets the oldest there is, and ``None`` means the newest."""
    if not versions:
        return None
    ordered = sorted(versions, key=lambda v: v.version)
    if as_of is None:
        return ordered[-1]
    before = [v for v in ordered if v.ingested_at <= as_of]
    return before[-1] if before else ordered[0]


def stale_versions(versions: list[Version], now: float, retain_s: float) -> list[int]:
    """Versions whose successor was ingested more than ``retain_s`` ago (never the newest)."""
    ordered = sorted(versions, key=lambda v: v.version)
    return [v.version for v, nxt in itertools.pairwise(ordered) if now - nxt.ingested_at > retain_s]


_VERSIONS_COLUMNS = "kb, version, embedder, dim, ingested_at, sources, chunks"


class _SqlStore:
    """What both stores share: the ``kb_versions`` table, read the same way (``mark``: the
    driver's parameter placeholder)."""

    conn: Any
    lock: threading.Lock
    mark = "?"

    def versions(self, kb: str) -> list[Version]:
        with self.lock:
            rows = self.conn.execute(
                f"SELECT {_VERSIONS_COLUMNS} FROM kb_versions WHERE kb = {self.mark} ORDER BY version", (kb,)
            ).fetchall()
        return [_version(r) for r in rows]

    def pick(self, kb: str, as_of: float | None) -> Version | None:
        return pick_version(self.versions(kb), as_of)

    def close(self) -> None:
        self.conn.close()


class SqliteKbStore(_SqlStore):
    def __init__(self, path: str) -> None:
        try:
            import apsw
            import sqlite_vec  # type: ignore[import-untyped]
        except ImportError as exc:
            raise KbStoreError(
                "a SQLite knowledge base needs apsw and sqlite-vec: pip install 'ringflow[kb]'"
            ) from exc
        if path not in ("", ":memory:"):
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.conn = apsw.Connection(path or ":memory:")
        self.conn.enable_load_extension(True)
        self.conn.load_extension(sqlite_vec.loadable_path())
        self.conn.enable_load_extension(False)
        self.conn.set_busy_timeout(5000)
        self.serialize = sqlite_vec.serialize_float32
        self.lock = threading.Lock()
        with self.lock:
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute(
                "CREATE TABLE IF NOT EXISTS kb_versions (kb TEXT NOT NULL, version INTEGER NOT NULL, "
                "embedder TEXT NOT NULL, dim INTEGER NOT NULL, ingested_at REAL NOT NULL, "
                "sources TEXT NOT NULL, chunks INTEGER NOT NULL, PRIMARY KEY (kb, version))"
            )

    def _table(self, dim: int) -> str:
        name = f"kb_vec_{int(dim)}"
        self.conn.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {name} USING vec0(part TEXT partition key, "
            f"embedding float[{int(dim)}] distance_metric=cosine, +source TEXT, +ordinal INTEGER, +text TEXT)"
        )
        return name

    def write_version(
        self, head: Version, rows: Iterable[Row], copy_from: int | None, copied: list[str]
    ) -> None:
        part = f"{head.kb}@{head.version}"
        with self.lock, self.conn:  # one transaction: the version appears whole or not at all
            table = self._table(head.dim)
            if copy_from is not None:
                for label in copied:
                    self.conn.execute(
                        f"INSERT INTO {table} (part, embedding, source, ordinal, text) "
                        f"SELECT ?, embedding, source, ordinal, text FROM {table} "
                        "WHERE part = ? AND source = ?",
                        (part, f"{head.kb}@{copy_from}", label),
                    )
            self.conn.executemany(
                f"INSERT INTO {table} (part, embedding, source, ordinal, text) VALUES (?, ?, ?, ?, ?)",
                ((part, self.serialize(list(r.embedding)), r.source, r.ordinal, r.text) for r in rows),
            )
            self.conn.execute(
                f"INSERT INTO kb_versions ({_VERSIONS_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    head.kb,
                    head.version,
                    head.embedder,
                    head.dim,
                    head.ingested_at,
                    json.dumps(head.sources),
                    head.chunks,
                ),
            )

    def search(self, v: Version, vector: Sequence[float], k: int, exact: bool = False) -> list[Hit]:
        part = f"{v.kb}@{v.version}"
        blob = self.serialize(list(vector))
        table = f"kb_vec_{int(v.dim)}"
        with self.lock:
            if exact:  # the brute-force scan bench/kb.py compares against: every row, in SQL
                rows = self.conn.execute(
                    f"SELECT source, ordinal, text, vec_distance_cosine(embedding, ?) AS d FROM {table} "
                    "WHERE part = ? ORDER BY d LIMIT ?",
                    (blob, part, k),
                ).fetchall()
            else:
                rows = self.conn.execute(
                    f"SELECT source, ordinal, text, distance FROM {table} "
                    "WHERE embedding MATCH ? AND k = ? AND part = ? ORDER BY distance",
                    (blob, k, part),
                ).fetchall()
        return [Hit(str(r[0]), int(str(r[1])), str(r[2]), float(str(r[3]))) for r in rows]

    def prune(self, kb: str, now: float, retain_s: float = RETAIN_S) -> list[int]:
        versions = self.versions(kb)
        stale = stale_versions(versions, now, retain_s)
        dims = {v.version: v.dim for v in versions}
        with self.lock, self.conn:
            for n in stale:
                self.conn.execute(f"DELETE FROM {self._table(dims[n])} WHERE part = ?", (f"{kb}@{n}",))
                self.conn.execute("DELETE FROM kb_versions WHERE kb = ? AND version = ?", (kb, n))
        return stale


class PostgresKbStore(_SqlStore):
    mark = "%s"

    def __init__(
        self, conninfo: str, connect_timeout_s: float = 10.0, statement_timeout_s: float = 30.0
    ) -> None:
        import psycopg

        self.psycopg = psycopg
        self.conn = psycopg.connect(
            conninfo,
            autocommit=True,
            connect_timeout=max(1, int(connect_timeout_s)),
        )
        self.lock = threading.Lock()
        with self.lock:
            # set here, not in the connection's options: the URL's own (a search_path) stay
            self.conn.execute(f"SET statement_timeout = {int(statement_timeout_s * 1000)}")
            try:
                self.conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            except psycopg.Error as exc:
                raise KbStoreError(
                    f"PostgreSQL cannot load pgvector ({str(exc).strip()}): install the server's "
                    "postgresql-NN-pgvector package (docs/knowledge.md)"
                ) from None
            # the extension lives in one schema (where it was first created): its type and
            # operators must be found from a search_path that names another one
            row = self.conn.execute(
                "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
                "WHERE e.extname = 'vector'"
            ).fetchone()
            if row is not None:
                self.conn.execute(
                    "SELECT set_config('search_path', current_setting('search_path') || ', ' "
                    "|| quote_ident(%s), false)",
                    (row[0],),
                )
            self.conn.execute(
                "CREATE TABLE IF NOT EXISTS kb_versions (kb TEXT NOT NULL, version INTEGER NOT NULL, "
                "embedder TEXT NOT NULL, dim INTEGER NOT NULL, ingested_at DOUBLE PRECISION NOT NULL, "
                "sources TEXT NOT NULL, chunks INTEGER NOT NULL, PRIMARY KEY (kb, version))"
            )
        self.tables: set[int] = set()

    def _table(self, dim: int) -> str:
        name = f"kb_chunks_{int(dim)}"
        if dim not in self.tables:
            self.conn.execute(
                f"CREATE TABLE IF NOT EXISTS {name} (kb TEXT NOT NULL, version INTEGER NOT NULL, "
                f"source TEXT NOT NULL, ordinal INTEGER NOT NULL, text TEXT NOT NULL, "
                f"embedding vector({int(dim)}) NOT NULL, PRIMARY KEY (kb, version, source, ordinal))"
            )
            self.conn.execute(
                f"CREATE INDEX IF NOT EXISTS {name}_hnsw ON {name} USING hnsw (embedding vector_cosine_ops)"
            )
            self.tables.add(dim)
        return name

    def write_version(
        self, head: Version, rows: Iterable[Row], copy_from: int | None, copied: list[str]
    ) -> None:
        with self.lock:
            table = self._table(head.dim)
            with self.conn.transaction():  # the version appears whole or not at all
                if copy_from is not None and copied:
                    self.conn.execute(
                        f"INSERT INTO {table} (kb, version, source, ordinal, text, embedding) "
                        f"SELECT kb, %s, source, ordinal, text, embedding FROM {table} "
                        "WHERE kb = %s AND version = %s AND source = ANY(%s)",
                        (head.version, head.kb, copy_from, copied),
                    )
                with self.conn.cursor() as cur:
                    cur.executemany(
                        f"INSERT INTO {table} (kb, version, source, ordinal, text, embedding) "
                        "VALUES (%s, %s, %s, %s, %s, %s::vector)",
                        [
                            (head.kb, head.version, r.source, r.ordinal, r.text, _vec_text(r.embedding))
                            for r in rows
                        ],
                    )
                self.conn.execute(
                    f"INSERT INTO kb_versions ({_VERSIONS_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    (
                        head.kb,
                        head.version,
                        head.embedder,
                        head.dim,
                        head.ingested_at,
                        json.dumps(head.sources),
                        head.chunks,
                    ),
                )
            # fresh statistics: without them the planner takes the new rows for few and
            # sorts them all by distance instead of walking the HNSW index (bench/kb.py)
            self.conn.execute(f"ANALYZE {table}")

    def search(self, v: Version, vector: Sequence[float], k: int, exact: bool = False) -> list[Hit]:
        table = f"kb_chunks_{int(v.dim)}"
        q = _vec_text(vector)
        with self.lock, self.conn.transaction():
            if exact:  # the brute-force scan bench/kb.py compares against: no index, every row
                self.conn.execute("SET LOCAL enable_indexscan = off")
                self.conn.execute("SET LOCAL enable_bitmapscan = off")
            else:
                # a filtered HNSW scan goes on until it has k rows of this version
                self.conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
                self.conn.execute("SET LOCAL hnsw.ef_search = 80")
            rows = self.conn.execute(
                f"SELECT source, ordinal, text, embedding <=> %s::vector AS d FROM {table} "
                "WHERE kb = %s AND version = %s ORDER BY embedding <=> %s::vector LIMIT %s",
                (q, v.kb, v.version, q, k),
            ).fetchall()
        hits = [Hit(r[0], int(r[1]), r[2], float(r[3])) for r in rows]
        return sorted(hits, key=lambda h: h.distance)  # relaxed order: nearly sorted

    def prune(self, kb: str, now: float, retain_s: float = RETAIN_S) -> list[int]:
        versions = self.versions(kb)
        stale = stale_versions(versions, now, retain_s)
        dims = {v.version: v.dim for v in versions}
        with self.lock, self.conn.transaction():
            for n in stale:
                self.conn.execute(
                    f"DELETE FROM {self._table(dims[n])} WHERE kb = %s AND version = %s", (kb, n)
                )
                self.conn.execute("DELETE FROM kb_versions WHERE kb = %s AND version = %s", (kb, n))
        return stale


def open_store(
    database_url: str, connect_timeout_s: float = 10.0, statement_timeout_s: float = 30.0
) -> KbStore:
    """The store for the call records' database URL (``sqlite:///PATH`` or ``postgresql://``)."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        return SqliteKbStore(url.database or ":memory:")
    if url.get_backend_name() == "postgresql":
        conninfo = url.set(drivername="postgresql").render_as_string(hide_password=False)
        return PostgresKbStore(conninfo, connect_timeout_s, statement_timeout_s)
    raise KbStoreError(f"knowledge bases live in SQLite or PostgreSQL, not {url.get_backend_name()}")
