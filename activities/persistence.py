"""Storing call records in SQL (SQLite for dev, PostgreSQL in production).

Every write is an idempotent upsert keyed by the call id (and transcript index), because
Temporal may run an activity more than once: a retry after a lost response must leave the
same rows behind. Snapshots carry ``updated_at`` and an older snapshot never overwrites a
newer one, so a late retry cannot roll a record back.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import JSON, Column, DateTime, Engine, String, event, inspect, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DataError, DBAPIError
from sqlalchemy.pool import ConnectionPoolEntry
from sqlmodel import Field, SQLModel, create_engine
from temporalio import activity
from temporalio.exceptions import ApplicationError

from ringflow.activities.db_work import DB_WORK
from ringflow.callflow.safe_text import scrub
from ringflow.contract.records import CallRecord, TranscriptAppend, TranscriptItem

JsonType = JSON().with_variant(JSONB(), "postgresql")


def _json_col() -> Any:
    return Field(default=None, sa_column=Column(JsonType, nullable=False))


def _json_or_null() -> Any:
    return Field(default=None, sa_column=Column(JsonType, nullable=True))


def _ts_col(nullable: bool = False, index: bool = False) -> Any:
    return Field(
        default=None,
        sa_column=Column(DateTime(timezone=True), nullable=nullable, index=index),
    )


class CallRow(SQLModel, table=True):
    """Table ``calls``: one row per call, the latest snapshot."""

    __tablename__ = "calls"

    call_id: str = Field(primary_key=True, max_length=200)
    workflow_id: str = Field(max_length=300)
    flow: str = Field(max_length=100, index=True)
    flow_version: int = 1
    status: str = Field(max_length=40, index=True)
    node: str | None = Field(default=None, max_length=100)
    path: list[str] = _json_col()
    variables: dict[str, Any] = _json_col()
    extracted: dict[str, Any] = _json_col()
    state: dict[str, Any] = _json_col()
    disposition: str | None = Field(default=None, max_length=200)
    tags: list[str] = _json_col()
    end_reason: str | None = Field(default=None, max_length=100)
    transcript: list[dict[str, Any]] = _json_col()
    started_at: datetime = _ts_col(index=True)
    ended_at: datetime | None = _ts_col(nullable=True)
    updated_at: datetime = _ts_col()
    direction: str = Field(max_length=20)
    campaign_id: str | None = Field(default=None, max_length=200, index=True)
    # Added after the first release: nullable, so ``add_missing_columns`` can add them to a
    # table created before them.
    room: str | None = Field(default=None, max_length=300)
    sip: dict[str, Any] | None = _json_or_null()
    amd: dict[str, Any] | None = _json_or_null()
    recording: dict[str, Any] | None = _json_or_null()
    analysis: dict[str, Any] | None = _json_or_null()
    caller_number: str | None = Field(default=None, max_length=256)
    called_number: str | None = Field(default=None, max_length=256)
    refused: int | None = None  # the LLM's function calls the flow refused (CallRecord.refused)


class CallTurnRow(SQLModel, table=True):
    """Table ``call_turns``: transcript entries, appended as the call goes."""

    __tablename__ = "call_turns"

    call_id: str = Field(primary_key=True, max_length=200)
    idx: int = Field(primary_key=True)
    role: str = Field(max_length=40)
    text: str = Field(sa_column=Column(String, nullable=False))
    node: str | None = Field(default=None, max_length=100)
    at: datetime | None = _ts_col(nullable=True)
    data: dict[str, Any] = _json_col()


class FlowCanaryCallRow(SQLModel, table=True):
    """Table ``flow_canary_calls``: the side each call of a canary was sent to (written by
    ``activities/flow_canaries.resolve_call``, and here for a campaign's call whose record
    names its side)."""

    __tablename__ = "flow_canary_calls"

    call_id: str = Field(primary_key=True, max_length=200)
    canary_id: str = Field(max_length=200, index=True)
    side: str = Field(max_length=20)
    at: float = 0.0


# SQLModel's classes get ``__table__`` from SQLAlchemy at class creation; its stubs do not
# declare it, hence the ignores on each use below.
_TABLES = [CallRow.__table__, CallTurnRow.__table__, FlowCanaryCallRow.__table__]  # type: ignore[attr-defined]
_JSON_FIELDS = (
    "path",
    "variables",
    "extracted",
    "state",
    "tags",
    "transcript",
    "sip",
    "amd",
    "recording",
    "analysis",
)
_engines: dict[str, Engine] = {}
_engines_lock = threading.Lock()


def normalize_database_url(url: str) -> URL:
    """``postgresql://`` means psycopg 3 here (the driver we ship), not psycopg2."""
    parsed = make_url(url)
    if parsed.drivername in ("postgres", "postgresql"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def _sqlite_pragmas(dbapi_conn: Any, _record: ConnectionPoolEntry) -> None:
    # WAL lets the CLI read while the worker writes; busy_timeout rides out short locks.
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=5000")
    cur.close()


@dataclass(frozen=True)
class DatabaseLimits:
    """How long any one database step may take (``RINGFLOW_DATABASE_*``).

    A connection the network dropped without a word (a partition, a failover, a NAT that
    forgot it) never answers: without these a thread waits on it for ever, and a pool of
    such connections stops every later write. The server's ``statement_timeout`` bounds a
    slow query; the client's own deadline (``statement_timeout_s`` plus a margin) bounds a
    round trip that never returns (``deadline_s``), and closes that connection so the pool
    opens a new one."""

    connect_timeout_s: float = 10.0
    statement_timeout_s: float = 30.0
    pool_recycle_s: float = 300.0  # a pooled connection older than this is replaced
    pool_timeout_s: float = 10.0  # waiting for a free pooled connection

    @property
    def deadline_s(self) -> float:
        """The client's: the server's statement timeout fires first when it is reachable."""
        return self.statement_timeout_s + min(5.0, self.statement_timeout_s)


_limits = DatabaseLimits()


def configure_database(limits: DatabaseLimits) -> None:
    """The limits engines made from now on get (the worker sets them from its settings)."""
    global _limits
    _limits = limits


def _postgres_connect_args(url: URL, limits: DatabaseLimits) -> dict[str, Any]:
    given = url.query.get("options")  # the URL's own (a search_path) are kept
    given = " ".join(given) if isinstance(given, tuple) else given
    timeout = f"-c statement_timeout={int(limits.statement_timeout_s * 1000)}"
    return {
        "connect_timeout": max(2, math.ceil(limits.connect_timeout_s)),
        # TCP keepalives and a user timeout: a dead peer's connection fails in about a
        # minute instead of the kernel's two hours (unacknowledged writes: the timeout)
        "keepalives": 1,
        "keepalives_idle": 30,
        "keepalives_interval": 10,
        "keepalives_count": 3,
        "tcp_user_timeout": int(limits.deadline_s * 1000),
        "options": f"{given} {timeout}" if given else timeout,
    }


def _bounded_connection_class(deadline_s: float) -> Any:
    """A psycopg connection whose every round trip has a deadline: past it the connection
    is closed (its state is unknown) and an ``OperationalError`` raised, which SQLAlchemy
    takes as a disconnect and so drops the connection from its pool."""
    import psycopg
    from psycopg import errors

    wait_timeout = getattr(errors, "_WaitTimeout", None) or TimeoutError

    class BoundedConnection(psycopg.Connection[Any]):
        def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
            try:
                return super().wait(gen, interval, deadline_s if timeout is None else timeout)
            except wait_timeout:
                self.pgconn.finish()
                raise psycopg.OperationalError(
                    f"no answer from the database within {deadline_s:g} s: connection closed"
                ) from None

    return BoundedConnection


def get_engine(database_url: str) -> Engine:
    """One engine (and pool) per URL for the life of the process; creates the tables."""
    with _engines_lock:
        engine = _engines.get(database_url)
        if engine is not None:
            return engine
        url = normalize_database_url(database_url)
        limits = _limits
        # hide_parameters: a failed statement's message never carries the record's values
        # (personal data, and a failure as large as the record past Temporal's limit).
        kwargs: dict[str, Any] = {"pool_pre_ping": True, "hide_parameters": True}
        if url.get_backend_name() == "sqlite":
            if url.database and url.database != ":memory:":
                Path(url.database).parent.mkdir(parents=True, exist_ok=True)
            kwargs["connect_args"] = {"check_same_thread": False}
        elif url.get_backend_name() == "postgresql":
            kwargs["connect_args"] = _postgres_connect_args(url, limits)
            kwargs["pool_recycle"] = limits.pool_recycle_s
            kwargs["pool_timeout"] = limits.pool_timeout_s
        engine = create_engine(url, **kwargs)
        if url.get_backend_name() == "sqlite":
            event.listen(engine, "connect", _sqlite_pragmas)
        elif url.get_dialect().driver == "psycopg":
            bounded = _bounded_connection_class(limits.deadline_s)

            @event.listens_for(engine, "do_connect")
            def _connect(_dialect: Any, _rec: Any, cargs: Any, cparams: dict[str, Any]) -> Any:
                return bounded.connect(*cargs, **cparams)

        SQLModel.metadata.create_all(engine, tables=_TABLES)
        add_missing_columns(engine)
        _engines[database_url] = engine
        return engine


def add_missing_columns(engine: Engine) -> list[str]:
    """The schema's migration: ``create_all`` makes missing tables but never alters one, so
    a column added to a table since a database was created (all such columns are nullable)
    is added here, idempotently; two processes racing to add it both end up with it."""
    added: list[str] = []
    for table in _TABLES:
        have = {c["name"] for c in inspect(engine).get_columns(table.name)}
        for col in table.columns:
            if col.name in have:
                continue
            if not col.nullable:
                raise RuntimeError(f"{table.name}.{col.name} is missing and not nullable: migrate by hand")
            kind = col.type.compile(dialect=engine.dialect)
            guard = "IF NOT EXISTS " if engine.dialect.name == "postgresql" else ""
            try:
                with engine.begin() as conn:
                    conn.execute(text(f"ALTER TABLE {table.name} ADD COLUMN {guard}{col.name} {kind}"))
            except DBAPIError:
                if col.name not in {c["name"] for c in inspect(engine).get_columns(table.name)}:
                    raise
                continue  # another process added it first
            added.append(f"{table.name}.{col.name}")
    return added


def dispose_engines() -> None:
    """Close every cached pool (tests, shutdown)."""
    with _engines_lock:
        for engine in _engines.values():
            engine.dispose()
        _engines.clear()


def _insert_for(engine: Engine, table: Any) -> Any:
    if engine.dialect.name == "postgresql":
        return postgresql.insert(table)
    if engine.dialect.name == "sqlite":
        return sqlite.insert(table)
    raise NotImplementedError(f"upsert is not implemented for {engine.dialect.name}")


def _bounded(table: Any, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with every string cut to its column's length: the sanitised record's."""
    out = dict(values)
    for col in table.columns:
        limit = getattr(col.type, "length", None)
        if limit and isinstance(out.get(col.name), str):
            out[col.name] = out[col.name][:limit]
    return out


def _record_values(record: CallRecord) -> dict[str, Any]:
    # NUL and lone surrogates are replaced, whatever path they came by: PostgreSQL refuses
    # U+0000 in text and jsonb, and nothing encodes a lone surrogate.
    as_json = scrub(record.model_dump(mode="json"))
    values = scrub(record.model_dump())
    for name in _JSON_FIELDS:
        values[name] = as_json[name]
    return dict(values)


def upsert_call(database_url: str, record: CallRecord) -> None:
    """Insert or update the call's row; an older snapshot never replaces a newer one.

    A value the database refuses (a ``DataError``: it cannot succeed on a retry) is written
    sanitised instead, every string cut to its column; if even that is refused, the record
    goes unwritten with a short, non-retryable failure rather than retrying for ever."""
    table = CallRow.__table__  # type: ignore[attr-defined]
    values = _record_values(record)
    canary = values.pop("canary", None)
    if canary:  # a campaign's call on a canary's side: the canary counts it with that side
        canary_id, _, side = str(canary).rpartition(":")
        record_side(database_url, record.call_id, canary_id, side)
    try:
        _upsert_call_values(database_url, values)
    except DataError as first:
        try:
            _upsert_call_values(database_url, _bounded(table, values))
        except DataError as exc:
            raise ApplicationError(
                f"call {record.call_id[:128]}: the database refused its record: {short_error(exc)} "
                f"(first: {short_error(first)})",
                type="RecordRefused",
                non_retryable=True,
            ) from None


def record_side(database_url: str, call_id: str, canary_id: str, side: str) -> None:
    """Record that ``call_id`` is on ``side`` of the canary (a campaign's call, whose side the
    campaign's workflow chose by the same hash as ``resolve_call``, ``callflow/canary.py``);
    the first record of a call stands, as there."""
    if side not in ("candidate", "baseline") or not canary_id:
        return
    engine = get_engine(database_url)
    table = FlowCanaryCallRow.__table__  # type: ignore[attr-defined]
    stmt = _insert_for(engine, table).values(call_id=call_id, canary_id=canary_id, side=side, at=time.time())
    with engine.begin() as conn:
        conn.execute(stmt.on_conflict_do_nothing(index_elements=[table.c.call_id]))


def short_error(exc: DBAPIError) -> str:
    """The driver's message, first line, bounded: never the statement or its values."""
    orig = exc.orig if exc.orig is not None else exc
    first = (str(orig).strip().splitlines() or [""])[0]
    return f"{type(orig).__name__}: {first[:200]}"


def _upsert_call_values(database_url: str, values: dict[str, Any]) -> None:
    engine = get_engine(database_url)
    table = CallRow.__table__  # type: ignore[attr-defined]
    stmt = _insert_for(engine, table).values(**values)
    stmt = stmt.on_conflict_do_update(
        index_elements=[table.c.call_id],
        set_={name: stmt.excluded[name] for name in values if name != "call_id"},
        where=table.c.updated_at <= stmt.excluded.updated_at,
    )
    with engine.begin() as conn:
        conn.execute(stmt)


def upsert_turns(database_url: str, call_id: str, items: list[TranscriptItem]) -> int:
    """Write transcript entries keyed by (call_id, idx); returns how many were given."""
    if not items:
        return 0
    engine = get_engine(database_url)
    table = CallTurnRow.__table__  # type: ignore[attr-defined]
    rows = []
    for item in items:
        row = scrub(item.model_dump())
        row["data"] = scrub(item.model_dump(mode="json")["data"])
        rows.append(_bounded(table, {"call_id": call_id, **row}))
    stmt = _insert_for(engine, table).values(rows)
    stmt = stmt.on_conflict_do_update(
        index_elements=[table.c.call_id, table.c.idx],
        set_={name: stmt.excluded[name] for name in ("role", "text", "node", "at", "data")},
    )
    with engine.begin() as conn:
        conn.execute(stmt)
    return len(rows)


def load_transcript(call_id: str, *, database_url: str) -> list[TranscriptItem]:
    """The appended transcript of a call, in order."""
    table = CallTurnRow.__table__  # type: ignore[attr-defined]
    with get_engine(database_url).connect() as conn:
        rows = conn.execute(select(table).where(table.c.call_id == call_id).order_by(table.c.idx)).mappings()
        return [TranscriptItem.model_validate({k: v for k, v in r.items() if k != "call_id"}) for r in rows]


def load_call(call_id: str, *, database_url: str, include_turns: bool = True) -> CallRecord | None:
    """The stored record, or None. With ``include_turns``, the transcript is the whole one:
    entries appended as the call went (the head of a continued-as-new or long call) joined
    with the snapshot's by index, in order, an appended entry winning over the snapshot's."""
    table = CallRow.__table__  # type: ignore[attr-defined]
    with get_engine(database_url).connect() as conn:
        row = conn.execute(select(table).where(table.c.call_id == call_id)).mappings().first()
    if row is None:
        return None
    record = CallRecord.model_validate(dict(row))
    if include_turns:
        turns = load_transcript(call_id, database_url=database_url)
        if turns:
            stored = {t.idx: t.model_dump(mode="json") for t in turns}
            for item in record.transcript:
                idx = item.get("idx")
                if isinstance(idx, int) and idx not in stored:
                    stored[idx] = item
            record.transcript = [stored[i] for i in sorted(stored)]
    return record


def delete_call(call_id: str, *, database_url: str) -> None:
    """Remove a call and its transcript (tests, data-retention jobs)."""
    engine = get_engine(database_url)
    with engine.begin() as conn:
        for table in _TABLES:
            conn.execute(table.delete().where(table.c.call_id == call_id))


class CallStore:
    """The persistence activities, bound to one database.

    A class rather than module functions so the worker passes the database URL in
    (activities never read Ringflow's settings themselves). Workflows refer to the
    activities by name: ``"persist_call"`` and ``"append_transcript"``.
    """

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url

    @activity.defn(name="persist_call")
    async def persist_call(self, record: CallRecord) -> None:
        await DB_WORK.run(upsert_call, self.database_url, record)

    @activity.defn(name="append_transcript")
    async def append_transcript(self, batch: TranscriptAppend) -> int:
        try:
            return await DB_WORK.run(upsert_turns, self.database_url, batch.call_id, batch.items)
        except DataError as exc:  # refused now, refused on every retry
            raise ApplicationError(
                f"call {batch.call_id[:128]}: the database refused its transcript: {short_error(exc)}",
                type="RecordRefused",
                non_retryable=True,
            ) from None
