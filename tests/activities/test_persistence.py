"""Call records on real SQLite and PostgreSQL: idempotent upserts, ordering, transcripts."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select
from temporalio.testing import ActivityEnvironment

from ringflow.activities.persistence import (
    CallRow,
    CallStore,
    CallTurnRow,
    dispose_engines,
    get_engine,
    load_call,
    load_transcript,
    normalize_database_url,
    upsert_call,
    upsert_turns,
)
from ringflow.contract.records import CallRecord, TranscriptAppend, TranscriptItem

T0 = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


def make_record(**overrides: object) -> CallRecord:
    data: dict[str, object] = {
        "call_id": f"call-{uuid.uuid4().hex[:10]}",
        "workflow_id": "call/demo",
        "flow": "restaurant",
        "flow_version": 3,
        "node": "greet",
        "path": ["greet"],
        "variables": {"name": "Ada", "party": 4},
        "state": {"order": {"total": 12.5}},
        "tags": ["vip"],
        "transcript": [{"role": "assistant", "text": "Hello"}],
        "started_at": T0,
        "updated_at": T0,
        "direction": "inbound",
        "campaign_id": "spring",
    }
    data.update(overrides)
    return CallRecord.model_validate(data)


def count_rows(database_url: str, table: object, call_id: str) -> int:
    t = table.__table__  # type: ignore[attr-defined]
    with get_engine(database_url).connect() as conn:
        return int(conn.execute(select(func.count()).where(t.c.call_id == call_id)).scalar_one())


def test_upsert_twice_leaves_one_identical_row(database_url: str) -> None:
    record = make_record()
    upsert_call(database_url, record)
    upsert_call(database_url, record)
    assert count_rows(database_url, CallRow, record.call_id) == 1
    assert load_call(record.call_id, database_url=database_url) == record


def test_newer_snapshot_wins_and_older_is_ignored(database_url: str) -> None:
    first = make_record()
    ended = first.model_copy(
        update={
            "status": "ended",
            "node": "goodbye",
            "path": ["greet", "goodbye"],
            "extracted": {"time": "7 PM"},
            "disposition": "booked",
            "end_reason": "completed",
            "ended_at": T0 + timedelta(minutes=2),
            "updated_at": T0 + timedelta(minutes=2),
        }
    )
    upsert_call(database_url, first)
    upsert_call(database_url, ended)
    upsert_call(database_url, first)  # a late retry of an older snapshot
    stored = load_call(first.call_id, database_url=database_url)
    assert stored == ended
    assert stored is not None and stored.ended_at is not None
    assert stored.ended_at.tzinfo is not None


def test_load_call_of_unknown_id_is_none(database_url: str) -> None:
    assert load_call("no-such-call", database_url=database_url) is None


def test_transcript_append_is_idempotent_and_ordered(database_url: str) -> None:
    record = make_record()
    upsert_call(database_url, record)
    items = [
        TranscriptItem(idx=1, role="user", text="A table for four", at=T0 + timedelta(seconds=3)),
        TranscriptItem(idx=0, role="assistant", text="Hello", node="greet", at=T0),
    ]
    assert upsert_turns(database_url, record.call_id, items) == 2
    upsert_turns(database_url, record.call_id, items)  # retried activity
    upsert_turns(
        database_url,
        record.call_id,
        [TranscriptItem(idx=2, role="tool", text="", data={"result": {"ok": True}})],
    )
    assert count_rows(database_url, CallTurnRow, record.call_id) == 3
    turns = load_transcript(record.call_id, database_url=database_url)
    assert [t.idx for t in turns] == [0, 1, 2]
    assert turns[0].at == T0 and turns[2].data == {"result": {"ok": True}}
    stored = load_call(record.call_id, database_url=database_url)
    assert stored is not None and [t["text"] for t in stored.transcript][:2] == [
        "Hello",
        "A table for four",
    ]
    raw = load_call(record.call_id, database_url=database_url, include_turns=False)
    assert raw is not None and raw.transcript == record.transcript


async def test_activities_through_activity_environment(database_url: str) -> None:
    store = CallStore(database_url)
    env = ActivityEnvironment()
    record = make_record()
    await env.run(store.persist_call, record)
    await env.run(store.persist_call, record)
    batch = TranscriptAppend(call_id=record.call_id, items=[TranscriptItem(idx=0, role="user", text="hi")])
    assert await env.run(store.append_transcript, batch) == 1
    assert await env.run(store.append_transcript, batch) == 1
    stored = load_call(record.call_id, database_url=database_url)
    assert stored is not None and stored.transcript == [
        {"idx": 0, "role": "user", "text": "hi", "node": None, "at": None, "data": {}}
    ]


def test_default_relative_sqlite_url_creates_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    url = "sqlite:///.ringflow/ringflow.db"
    try:
        upsert_call(url, make_record())
    finally:
        dispose_engines()
    assert (tmp_path / ".ringflow" / "ringflow.db").is_file()


def test_postgres_urls_use_psycopg3() -> None:
    assert normalize_database_url("postgresql://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_database_url("postgres://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_database_url("sqlite:///x.db").drivername == "sqlite"


def test_load_call_joins_a_transcript_split_by_continue_as_new(database_url: str) -> None:
    """Issue 9: turns 0-5 appended at continue-as-new, 6-139 in the final snapshot; the
    reader once returned the 6 appended turns only."""
    snapshot = [
        TranscriptItem(idx=i, role="user", text=f"t{i}").model_dump(mode="json") for i in range(6, 140)
    ]
    record = make_record(transcript=snapshot)
    upsert_call(database_url, record)
    head = [TranscriptItem(idx=i, role="user", text=f"t{i}") for i in range(6)]
    upsert_turns(database_url, record.call_id, head)
    stored = load_call(record.call_id, database_url=database_url)
    assert stored is not None
    assert [t["text"] for t in stored.transcript] == [f"t{i}" for i in range(140)]


def test_a_calls_table_from_before_the_line_columns_gets_them_added(database_url: str) -> None:
    """``create_all`` never alters a table: the columns added since (room, sip, amd) are
    added by ``add_missing_columns`` when a worker opens a database created before them."""
    from sqlalchemy import text

    from ringflow.activities.persistence import add_missing_columns
    from ringflow.contract.records import AmdVerdict, SipOutcome

    engine = get_engine(database_url)
    with engine.begin() as conn:
        for col in ("room", "sip", "amd"):
            conn.execute(text(f"ALTER TABLE calls DROP COLUMN {col}"))
    assert sorted(add_missing_columns(engine)) == ["calls.amd", "calls.room", "calls.sip"]
    assert add_missing_columns(engine) == []  # idempotent
    record = make_record(
        room="call-_+15550100_AbC",
        sip=SipOutcome(outcome="answered", code=200, status="OK", at=T0),
        amd=AmdVerdict(result="human", category="human", reason="greeting", speech_s=1.5, delay_s=0.4, at=T0),
    )
    upsert_call(database_url, record)
    assert load_call(record.call_id, database_url=database_url) == record
    plain = make_record()  # a call that was not dialed: no line fields
    upsert_call(database_url, plain)
    assert load_call(plain.call_id, database_url=database_url) == plain


def test_nul_and_lone_surrogates_are_stored_replaced(database_url: str) -> None:
    record = make_record(
        variables={"name": "A\x00da", "k\x00": "\ud800"},
        state={"note": ["x\x00"]},
        transcript=[{"role": "user", "text": "hi\x00"}],
    )
    upsert_call(database_url, record)
    upsert_turns(database_url, record.call_id, [TranscriptItem(idx=0, role="user", text="a\x00b\udfff")])
    got = load_call(record.call_id, database_url=database_url)
    assert got is not None
    assert got.variables == {"name": "A\ufffdda", "k\ufffd": "\ufffd"}
    assert got.state == {"note": ["x\ufffd"]}
    assert [t["text"] for t in got.transcript] == ["a\ufffdb\ufffd"]


async def test_a_record_postgres_refuses_is_written_sanitised_instead(postgres_url: str) -> None:
    # a flow name past its column (100): DataError, which no retry can cure
    record = make_record(flow="f" * 150, variables={"secret": "s" * 5000})
    await ActivityEnvironment().run(CallStore(postgres_url).persist_call, record)
    got = load_call(record.call_id, database_url=postgres_url)
    assert got is not None and got.flow == "f" * 100 and got.variables == {"secret": "s" * 5000}
