"""A campaign's contacts, attempts and the do-not-call list, in SQL (SQLite or PostgreSQL).

Contacts live here, not in workflow history: the campaign workflow walks them through
:func:`claim`, which hands out the next due contacts and writes an attempt row for each
before anything is dialed. Every write is keyed so a retried activity leaves the same rows:
a claim is keyed by the workflow's claim number (a retry returns the rows it made), an
outcome by (campaign, contact, attempt) and recorded once. The attempt row is what makes a
dial exactly-once per attempt: its call id names the child workflow, which Temporal starts
once, and whose dial activity never rings twice (``activities/telephony.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel
from sqlalchemy import JSON, Column, Engine, func, select
from sqlmodel import Field, SQLModel

from ringflow.activities.campaign_rules import RETRY_OUTCOMES, RetryRule, Windows, window_open_at
from ringflow.activities.persistence import CallRow, _insert_for, get_engine
from ringflow.callflow.safe_text import scrub

ACTIVE = ("pending", "retry")  # states a claim may pick
FINAL = ("reached", "failed", "exhausted", "dnc", "no_window", "forgotten")  # forgotten: call forget --phone


class ContactRow(SQLModel, table=True):
    __tablename__ = "campaign_contacts"

    campaign_id: str = Field(primary_key=True, max_length=64)
    idx: int = Field(primary_key=True)
    phone: str = Field(max_length=32)
    tz: str = Field(max_length=64)
    variables: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    state: str = Field(default="pending", max_length=20, index=True)
    attempts: int = 0  # dialed attempts (max_attempts counts these)
    seq: int = 0  # attempt rows written, dialed or not: the next attempt's number is seq + 1
    next_at: float = Field(default=0.0, index=True)  # epoch seconds: due from then
    outcome: str | None = Field(default=None, max_length=40)
    disposition: str | None = Field(default=None, max_length=200)
    extracted: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    retries: dict[str, int] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))


class AttemptRow(SQLModel, table=True):
    __tablename__ = "campaign_attempts"

    campaign_id: str = Field(primary_key=True, max_length=64)
    idx: int = Field(primary_key=True)
    attempt: int = Field(primary_key=True)
    call_id: str = Field(max_length=128)
    claim_key: str = Field(max_length=64, index=True)
    status: str = Field(default="claimed", max_length=20)  # claimed, dialed, done, not_dialed
    outcome: str | None = Field(default=None, max_length=40)
    claimed_at: float = 0.0
    dialed_at: float | None = None
    ended_at: float | None = None


class DncRow(SQLModel, table=True):
    __tablename__ = "do_not_call"

    phone: str = Field(primary_key=True, max_length=32)
    added_at: float = 0.0


# SQLModel's classes get ``__table__`` from SQLAlchemy at class creation; its stubs do not
# declare it, hence the ignores.
_TABLES = [ContactRow.__table__, AttemptRow.__table__, DncRow.__table__]  # type: ignore[attr-defined]
C = ContactRow.__table__  # type: ignore[attr-defined]
A = AttemptRow.__table__  # type: ignore[attr-defined]
D = DncRow.__table__  # type: ignore[attr-defined]


def engine_for(database_url: str) -> Engine:
    engine = get_engine(database_url)
    SQLModel.metadata.create_all(engine, tables=_TABLES)  # checks first: cheap after the first call
    return engine


class Contact(BaseModel):
    phone: str
    tz: str
    variables: dict[str, Any] = {}


class Claimed(BaseModel):
    idx: int
    attempt: int
    call_id: str
    phone: str
    variables: dict[str, Any] = {}
    slot: float | None = None  # its slot on the trunk (epoch s): the dial waits for it (rounds with a lead)
    tz: str = "UTC"  # the contact's timezone (a journey's follow-ups keep to its window in it)
    journey_id: str | None = None  # a campaign of journeys: the contact's journey (``campaign_round``)


def claimed_attempt(row: Any, slot: float | None = None) -> Claimed:
    """An attempt row joined to its contact (``idx``, ``attempt``, ``call_id``, ``phone``,
    ``variables``, ``tz``) as a round gets it: a retried claim and a retried round answer
    with the same contact, timezone included, as the first try did."""
    return Claimed(
        idx=row["idx"],
        attempt=row["attempt"],
        call_id=row["call_id"],
        phone=row["phone"],
        variables=row["variables"],
        tz=row["tz"],
        slot=slot,
    )


class ClaimResult(BaseModel):
    claimed: list[Claimed]
    next_due: float | None  # the earliest a contact not claimed now becomes due; None: none left
    out_of_window: int = 0  # contacts due now but outside their window (moved to its opening)


def call_id_for(campaign_id: str, idx: int, attempt: int) -> str:
    return f"{campaign_id}-{idx}-{attempt}"


def add_contacts(
    database_url: str,
    campaign_id: str,
    contacts: list[Contact],
    start_idx: int = 0,
    now: float = 0.0,
    on_chunk: Callable[[int], None] | None = None,
) -> int:
    """Insert contacts numbered from ``start_idx``; rows already there are kept as they are.
    ``on_chunk`` hears how many are in after each thousand (``campaign start``'s progress)."""
    engine = engine_for(database_url)
    for i in range(0, len(contacts), 1000):
        rows = [
            {
                "campaign_id": campaign_id,
                "idx": start_idx + i + j,
                "phone": c.phone,
                "tz": c.tz,
                "variables": scrub(c.variables),  # what a caller of the store passed unchecked
                "state": "pending",
                "attempts": 0,
                "seq": 0,
                "next_at": now,
                "extracted": {},
                "retries": {},
            }
            for j, c in enumerate(contacts[i : i + 1000])
        ]
        stmt = _insert_for(engine, C).values(rows).on_conflict_do_nothing()
        with engine.begin() as conn:
            conn.execute(stmt)
        if on_chunk is not None:
            on_chunk(i + len(rows))
    return len(contacts)


def add_dnc(database_url: str, phones: list[str], now: float) -> int:
    if not phones:
        return 0
    engine = engine_for(database_url)
    rows = [{"phone": p, "added_at": now} for p in phones]
    stmt = _insert_for(engine, D).values(rows).on_conflict_do_nothing()
    with engine.begin() as conn:
        conn.execute(stmt)
    return len(phones)


def _dnc(conn: Any, phone: str) -> bool:
    return conn.execute(select(D.c.phone).where(D.c.phone == phone)).first() is not None


def on_dnc(database_url: str, phone: str) -> bool:
    """Whether ``phone`` is on the do-not-call list (a journey asks before each call)."""
    with engine_for(database_url).connect() as conn:
        return _dnc(conn, phone)


def claim(
    database_url: str,
    campaign_id: str,
    claim_key: str,
    limit: int,
    windows: Windows,
    max_attempts: int,
    now: float,
) -> ClaimResult:
    """Up to ``limit`` due contacts, each with a new attempt row, in one transaction.

    A contact due now but outside its calling window gets its window's next opening as its
    due time; one on the do-not-call list, or out of attempts, is closed. A retry of the same
    claim (same ``claim_key``) returns the attempts the first one wrote.
    """
    engine = engine_for(database_url)
    at = datetime.fromtimestamp(now, UTC)
    with engine.begin() as conn:
        done = (
            conn.execute(
                select(A, C.c.phone, C.c.variables, C.c.tz)
                .join(C, (C.c.campaign_id == A.c.campaign_id) & (C.c.idx == A.c.idx))
                .where(A.c.campaign_id == campaign_id, A.c.claim_key == claim_key)
            )
            .mappings()
            .all()
        )
        if done:
            return ClaimResult(claimed=[claimed_attempt(r) for r in done], next_due=now)
        out: list[Claimed] = []
        moved = 0
        while len(out) < limit:
            rows = (
                conn.execute(
                    select(C)
                    .where(C.c.campaign_id == campaign_id, C.c.state.in_(ACTIVE), C.c.next_at <= now)
                    .order_by(C.c.next_at, C.c.idx)
                    .limit(max(limit * 2, 50))
                )
                .mappings()
                .all()
            )
            if not rows:
                break
            for r in rows:
                if len(out) >= limit:
                    break
                # Only while still due: another claim (a round in flight beside this one, on
                # PostgreSQL) may have taken the row since it was read; then skip it.
                key = (C.c.campaign_id == campaign_id) & (C.c.idx == r["idx"]) & C.c.state.in_(ACTIVE)
                if r["attempts"] >= max_attempts:
                    conn.execute(C.update().where(key).values(state="exhausted"))
                    continue
                if _dnc(conn, r["phone"]):
                    conn.execute(C.update().where(key).values(state="dnc", outcome="dnc"))
                    continue
                opens = window_open_at(windows, r["tz"], at)
                if opens is None:
                    conn.execute(C.update().where(key).values(state="no_window"))
                    continue
                if opens != at:
                    moved += 1
                    conn.execute(C.update().where(key).values(next_at=opens.timestamp()))
                    continue
                n = r["seq"] + 1
                if conn.execute(C.update().where(key).values(state="dialing", seq=n)).rowcount != 1:
                    continue
                cid = call_id_for(campaign_id, r["idx"], n)
                conn.execute(
                    _insert_for(engine, A)
                    .values(
                        campaign_id=campaign_id,
                        idx=r["idx"],
                        attempt=n,
                        call_id=cid,
                        claim_key=claim_key,
                        status="claimed",
                        claimed_at=now,
                    )
                    .on_conflict_do_nothing()
                )
                out.append(
                    Claimed(
                        idx=r["idx"],
                        attempt=n,
                        call_id=cid,
                        phone=r["phone"],
                        variables=r["variables"],
                        tz=r["tz"],
                    )
                )
        nxt = conn.execute(
            select(func.min(C.c.next_at)).where(C.c.campaign_id == campaign_id, C.c.state.in_(ACTIVE))
        ).scalar()
    return ClaimResult(claimed=out, next_due=None if nxt is None else float(nxt), out_of_window=moved)


def predial(database_url: str, campaign_id: str, idx: int, attempt: int, windows: Windows, now: float) -> str:
    """Right before the dial: ``go``, or why not (``dnc``, ``window``). Not dialing gives the
    attempt back: the contact is closed (do-not-call) or due again when its window opens."""
    engine = engine_for(database_url)
    key = (C.c.campaign_id == campaign_id) & (C.c.idx == idx)
    akey = (A.c.campaign_id == campaign_id) & (A.c.idx == idx) & (A.c.attempt == attempt)
    with engine.begin() as conn:
        row = conn.execute(select(A.c.status).where(akey)).first()
        if row is not None and row[0] != "claimed":  # decided by an earlier try of this activity
            return "go" if row[0] in ("dialed", "done") else "skipped"
        c = conn.execute(select(C).where(key)).mappings().one()
        verdict = "go"
        if _dnc(conn, c["phone"]):
            verdict = "dnc"
            conn.execute(C.update().where(key).values(state="dnc", outcome="dnc"))
        else:
            at = datetime.fromtimestamp(now, UTC)
            opens = window_open_at(windows, c["tz"], at)
            if opens is None or opens != at:
                verdict = "window"
                conn.execute(
                    C.update()
                    .where(key)
                    .values(
                        state="retry" if opens else "no_window", next_at=opens.timestamp() if opens else now
                    )
                )
        if verdict == "go":
            conn.execute(C.update().where(key).values(attempts=c["attempts"] + 1))
        conn.execute(
            A.update()
            .where(akey)
            .values(
                status="dialed" if verdict == "go" else "not_dialed",
                dialed_at=now,
                outcome=None if verdict == "go" else verdict,
            )
        )
    return verdict


class Outcome(BaseModel):
    end_reason: str
    disposition: str | None = None
    extracted: dict[str, Any] = {}


def journey_outcome(view: dict[str, Any]) -> Outcome:
    """A campaign's journey, ended (a ``JourneyView`` as JSON): the campaign's outcome for
    the contact is its last call's, or ``dnc`` when the do-not-call list ended it."""
    calls = view.get("calls") or []
    last = calls[-1] if calls else {}
    end = view.get("end") or "error"
    reason = "dnc" if end == "dnc" else (last.get("end_reason") or end)
    extracted = view.get("extracted") or {}
    return Outcome(end_reason=reason, disposition=last.get("disposition"), extracted=extracted)


def classify(end_reason: str) -> str:
    """A retryable telephony outcome keeps its name; any conversation that ran is ``reached``."""
    return end_reason if end_reason in RETRY_OUTCOMES else "reached"


def record_outcome(
    database_url: str,
    campaign_id: str,
    idx: int,
    attempt: int,
    result: Outcome,
    retry: dict[str, RetryRule],
    max_attempts: int,
    time_scale: float,
    now: float,
) -> tuple[str, float | None]:
    """Close the attempt and decide the contact's next state; once per attempt."""
    engine = engine_for(database_url)
    key = (C.c.campaign_id == campaign_id) & (C.c.idx == idx)
    akey = (A.c.campaign_id == campaign_id) & (A.c.idx == idx) & (A.c.attempt == attempt)
    kind = classify(result.end_reason)
    with engine.begin() as conn:
        row = conn.execute(select(A.c.status).where(akey)).first()
        c = conn.execute(select(C).where(key)).mappings().one()
        if row is not None and row[0] == "done":
            return str(c["state"]), float(c["next_at"]) if c["state"] == "retry" else None
        conn.execute(A.update().where(akey).values(status="done", outcome=result.end_reason, ended_at=now))
        retries = dict(c["retries"] or {})
        values: dict[str, Any] = {"outcome": result.end_reason, "disposition": result.disposition}
        if kind == "reached":
            values.update(state="reached", extracted=scrub(result.extracted))
        else:
            rule = retry.get(kind)
            used = retries.get(kind, 0)
            if rule is not None and used < rule.count and c["attempts"] < max_attempts:
                retries[kind] = used + 1
                values.update(state="retry", retries=retries, next_at=now + rule.delay_s / time_scale)
            else:
                values.update(state="exhausted" if c["attempts"] >= max_attempts else "failed")
        conn.execute(C.update().where(key).values(**values))
    return str(values["state"]), values.get("next_at")


def release(database_url: str, campaign_id: str, idx: int, attempt: int, now: float) -> None:
    """A claimed attempt the workflow did not dial after all (paused or cancelled while it
    waited for its slot, no pacing): give it back. Only the workflow calls this, and only
    before it starts the attempt's call, so an attempt passed as ``dialed`` was not."""
    engine = engine_for(database_url)
    key = (C.c.campaign_id == campaign_id) & (C.c.idx == idx)
    akey = (A.c.campaign_id == campaign_id) & (A.c.idx == idx) & (A.c.attempt == attempt)
    with engine.begin() as conn:
        row = conn.execute(select(A.c.status).where(akey)).first()
        if row is None or row[0] not in ("claimed", "dialed"):
            return
        c = conn.execute(select(C.c.attempts).where(key)).one()
        conn.execute(A.update().where(akey).values(status="not_dialed", outcome="released"))
        conn.execute(
            C.update()
            .where(key)
            .values(state="retry", next_at=now, attempts=c[0] - 1 if row[0] == "dialed" else c[0])
        )


def counts(database_url: str, campaign_id: str) -> dict[str, dict[str, int]]:
    engine = engine_for(database_url)
    with engine.connect() as conn:
        states = conn.execute(
            select(C.c.state, func.count()).where(C.c.campaign_id == campaign_id).group_by(C.c.state)
        ).all()
        outcomes = conn.execute(
            select(A.c.outcome, func.count()).where(A.c.campaign_id == campaign_id).group_by(A.c.outcome)
        ).all()
    return {
        "contacts": {str(s): int(n) for s, n in states},
        "attempts": {str(o or "in_progress"): int(n) for o, n in outcomes},
    }


def report(database_url: str, campaign_id: str) -> list[dict[str, Any]]:
    """One row per contact: its attempts, final state and outcome, disposition, extracted values,
    and its last call's recording and analysis (success, score, sentiment, summary)."""
    engine = engine_for(database_url)
    calls = CallRow.__table__  # type: ignore[attr-defined]
    with engine.connect() as conn:
        rows = (
            conn.execute(select(C).where(C.c.campaign_id == campaign_id).order_by(C.c.idx)).mappings().all()
        )
        last = {
            r["idx"]: r["call_id"]
            for r in conn.execute(
                select(A.c.idx, A.c.call_id)
                .where(A.c.campaign_id == campaign_id)
                .order_by(A.c.idx, A.c.attempt)
            ).mappings()
        }
        found = {
            r["call_id"]: r
            for r in conn.execute(
                select(calls.c.call_id, calls.c.recording, calls.c.analysis).where(
                    calls.c.campaign_id == campaign_id
                )
            ).mappings()
        }
    return [
        {
            **call_columns(found.get(last.get(r["idx"], ""))),
            "idx": r["idx"],
            "phone": r["phone"],
            "timezone": r["tz"],
            "state": r["state"],
            "attempts": r["attempts"],
            "outcome": r["outcome"],
            "disposition": r["disposition"],
            "extracted": r["extracted"],
        }
        for r in rows
    ]


def call_columns(row: Any) -> dict[str, Any]:
    """A contact's last call's recording and analysis, as report columns (None: not there)."""
    recording = (row["recording"] if row is not None else None) or {}
    analysis = (row["analysis"] if row is not None else None) or {}
    success = analysis.get("success") or {}
    return {
        "call_id": row["call_id"] if row is not None else None,
        "success": success.get("pass"),
        "score": success.get("score"),
        "sentiment": analysis.get("sentiment"),
        "summary": analysis.get("summary"),
        "analysis_fields": analysis.get("fields") or {},
        "recording": recording.get("location"),
        "recording_status": recording.get("status"),
        "recording_s": recording.get("duration_s"),
    }


def aggregate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A campaign's report in figures: contacts by state and disposition, and of the calls
    analysed, the success rate and the average score."""
    judged = [r["success"] for r in rows if r.get("success") is not None]
    scores = [float(r["score"]) for r in rows if r.get("score") is not None]
    states: dict[str, int] = {}
    dispositions: dict[str, int] = {}
    for r in rows:
        states[r["state"]] = states.get(r["state"], 0) + 1
        if r.get("disposition"):
            dispositions[r["disposition"]] = dispositions.get(r["disposition"], 0) + 1
    return {
        "contacts": len(rows),
        "states": states,
        "dispositions": dispositions,
        "analysed": len(judged),
        "success_rate": sum(1 for s in judged if s) / len(judged) if judged else None,
        "average_score": sum(scores) / len(scores) if scores else None,
        "recorded": sum(1 for r in rows if r.get("recording_status") == "completed"),
    }


def attempts(database_url: str, campaign_id: str) -> list[dict[str, Any]]:
    engine = engine_for(database_url)
    with engine.connect() as conn:
        return [
            dict(r)
            for r in conn.execute(
                select(A).where(A.c.campaign_id == campaign_id).order_by(A.c.claimed_at, A.c.idx)
            ).mappings()
        ]


def contact_count(database_url: str, campaign_id: str) -> int:
    engine = engine_for(database_url)
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).where(C.c.campaign_id == campaign_id)).scalar() or 0)


def open_attempts(database_url: str, campaign_id: str, key_prefix: str) -> list[tuple[str, Claimed]]:
    """The attempts an earlier try of a round claimed (claim keys ``<key_prefix>.*``) and
    neither closed nor gave back, with their status (``claimed``: not checked at its slot
    yet; ``dialed``: checked, its call perhaps started): a retried round takes them up
    first, so no claimed contact is left in ``dialing`` by a lost worker."""
    engine = engine_for(database_url)
    with engine.connect() as conn:
        rows = (
            conn.execute(
                select(
                    A.c.idx,
                    A.c.attempt,
                    A.c.call_id,
                    A.c.status,
                    A.c.dialed_at,
                    C.c.phone,
                    C.c.variables,
                    C.c.tz,
                )
                .join(C, (C.c.campaign_id == A.c.campaign_id) & (C.c.idx == A.c.idx))
                .where(
                    A.c.campaign_id == campaign_id,
                    A.c.claim_key.like(
                        key_prefix.replace("%", r"\%").replace("_", r"\_") + ".%", escape="\\"
                    ),
                    A.c.status.in_(("claimed", "dialed")),
                )
                .order_by(A.c.claimed_at, A.c.idx)
            )
            .mappings()
            .all()
        )
    return [(str(r["status"]), claimed_attempt(r, slot=r["dialed_at"])) for r in rows]
