"""Canaries of published flow versions: the split of new calls, and what each side did.

``flow canary NAME@VERSION --percent N --against CHANNEL`` records a canary here (table
``flow_canaries``) and starts its workflow (``workflows/flow_canary.py``). While it runs,
every call that names the channel (``NAME@CHANNEL``, or ``NAME`` for ``production``) is
resolved by :func:`resolve_call`: a stable hash of the call's key (``callflow/canary.py``)
sends it to the candidate or to the baseline the channel served when the canary started,
and the call's side is recorded (table ``flow_canary_calls``). A call that names an exact
version is never split. The canary's workflow reads both sides' ended calls from the call
records (:func:`side_stats`) and settles the canary (:func:`settle`): a promotion moves the
channel to the candidate, a rollback leaves it and stops the split at once.

The resolution lives here, not in a command, so every way of starting a call (the CLI, the
inbound agent, the HTTP API) splits the same way.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel
from sqlalchemy import JSON, Column, Engine, Text, select, update
from sqlmodel import Field, SQLModel
from temporalio import activity

from ringflow.activities import flow_store
from ringflow.activities.persistence import CallRow, FlowCanaryCallRow, _insert_for
from ringflow.callflow.canary import CanaryPolicy, Side, SideStats, side_for
from ringflow.callflow.model import FlowDefinition

CanaryState = Literal["running", "promoted", "rolled_back"]
Settled = Literal["promoted", "rolled_back"]


class FlowCanaryRow(SQLModel, table=True):
    """Table ``flow_canaries``: one row per canary, running or settled."""

    __tablename__ = "flow_canaries"

    canary_id: str = Field(primary_key=True, max_length=200)
    name: str = Field(max_length=100, index=True)
    channel: str = Field(max_length=40)
    candidate: str = Field(max_length=12)
    baseline: str = Field(max_length=12)
    percent: float
    state: str = Field(max_length=20, index=True)
    reason: str = Field(default="", sa_column=Column(Text, nullable=False))
    policy: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    started_at: float = 0.0
    decided_at: float | None = None


_TABLES = [FlowCanaryRow.__table__, FlowCanaryCallRow.__table__]  # type: ignore[attr-defined]
C = FlowCanaryRow.__table__  # type: ignore[attr-defined]
CC = FlowCanaryCallRow.__table__  # type: ignore[attr-defined]
CALLS = CallRow.__table__  # type: ignore[attr-defined]


class CanaryError(ValueError):
    """A canary that cannot start or be found; the message says why and what exists."""


class Canary(BaseModel):
    canary_id: str
    name: str
    channel: str
    candidate: str
    baseline: str
    percent: float
    state: CanaryState
    reason: str = ""
    policy: CanaryPolicy = CanaryPolicy()
    started_at: float = 0.0
    decided_at: float | None = None

    @property
    def workflow_id(self) -> str:
        return canary_workflow_id(self.canary_id)


def canary_workflow_id(canary_id: str) -> str:
    return f"flow-canary-{canary_id}"


@dataclass(frozen=True)
class CallPin:
    """The version a new call runs, and the canary side it was sent to (None: no canary)."""

    version: flow_store.PublishedVersion
    canary_id: str | None = None
    side: Side | None = None


def _engine(database_url: str) -> Engine:
    engine = flow_store.engine_for(database_url)
    SQLModel.metadata.create_all(engine, tables=_TABLES)
    return engine


def _canary(row: Any) -> Canary:
    return Canary(
        canary_id=row.canary_id,
        name=row.name,
        channel=row.channel,
        candidate=row.candidate,
        baseline=row.baseline,
        percent=row.percent,
        state=row.state,
        reason=row.reason,
        policy=CanaryPolicy.model_validate(row.policy or {}),
        started_at=row.started_at,
        decided_at=row.decided_at,
    )


def running_canary(database_url: str, name: str, channel: str) -> Canary | None:
    with _engine(database_url).connect() as conn:
        row = conn.execute(
            select(C).where(C.c.name == name, C.c.channel == channel, C.c.state == "running")
        ).first()
    return _canary(row) if row is not None else None


def get_canary(database_url: str, canary_id: str) -> Canary | None:
    with _engine(database_url).connect() as conn:
        row = conn.execute(select(C).where(C.c.canary_id == canary_id)).first()
    return _canary(row) if row is not None else None


def settled_as(database_url: str, canary_id: str) -> Settled | None:
    """How the canary settled (None: still running). A campaign that named the canary's
    channel asks, to end its split: a settled canary's workflow splits no calls, and nor
    may a campaign that is still dialing (``workflows/campaign_messages.py``). A canary not
    on record counts as rolled back: no call may be split by a canary nobody watches."""
    canary = get_canary(database_url, canary_id)
    if canary is None:
        return "rolled_back"
    return None if canary.state == "running" else canary.state


def list_canaries(database_url: str, name: str | None = None) -> list[Canary]:
    """Canaries of ``name`` (every flow's without it), newest first."""
    query = select(C).order_by(C.c.started_at.desc(), C.c.canary_id)
    if name is not None:
        query = query.where(C.c.name == name)
    with _engine(database_url).connect() as conn:
        return [_canary(r) for r in conn.execute(query)]


def start_canary(
    database_url: str,
    ref: str,
    percent: float,
    against: str,
    policy: CanaryPolicy | None = None,
    now: float | None = None,
) -> Canary:
    """Record a running canary of ``ref`` (``NAME@VERSION``) against ``against``'s version."""
    name, _, version = ref.partition("@")
    if not version or not flow_store.VERSION_RE.fullmatch(version):
        raise CanaryError(
            f"'{ref[:120]}': a canary takes NAME@VERSION (see `ringflow flow versions {name[:100]}`)"
        )
    if not 0 < percent <= 100:
        raise CanaryError(f"--percent {percent:g}: a share of new calls, above 0 and at most 100")
    if flow_store.get_version(database_url, name, version) is None:
        raise CanaryError(f"{name}@{version} is not published (see `ringflow flow versions {name}`)")
    chans = flow_store.channels(database_url, name)
    if against not in chans:
        listed = ", ".join(sorted(chans)) or "none"
        raise CanaryError(
            f"flow '{name}' has no channel '{against[:40]}' to compare with (channels: {listed}; "
            f"`ringflow flow promote {name}@VERSION --channel {against[:40]}`)"
        )
    if chans[against] == version:
        raise CanaryError(f"{name}@{against} already serves {version}: nothing to compare it with")
    if (busy := running_canary(database_url, name, against)) is not None:
        raise CanaryError(
            f"a canary of {name}@{busy.candidate} against {against} is running ({busy.canary_id}): "
            "it settles first, or stop it (`ringflow flow canary stop`)"
        )
    at = time.time() if now is None else now
    canary = Canary(
        canary_id=f"{name}.{against}.{version}.{secrets.token_hex(3)}",
        name=name,
        channel=against,
        candidate=version,
        baseline=chans[against],
        percent=percent,
        state="running",
        policy=policy or CanaryPolicy(),
        started_at=at,
    )
    values = canary.model_dump()
    values["policy"] = canary.policy.model_dump()
    with _engine(database_url).begin() as conn:
        conn.execute(C.insert().values(**values))
    return canary


def resolve_call(database_url: str, ref: str, call_id: str, key: str | None = None) -> CallPin:
    """The version a new call of ``ref`` runs: :func:`flow_store.resolve`, except that a
    channel with a running canary sends the call to the side ``key`` (default ``call_id``)
    hashes to, and records it. The same call id asked again gets the side it got."""
    found = flow_store.resolve(database_url, ref)
    name, _, tail = ref.partition("@")
    channel = tail or flow_store.DEFAULT_CHANNEL
    if tail and flow_store.VERSION_RE.fullmatch(tail) and tail == found.version:
        return CallPin(found)  # an exact version is what the caller asked for
    canary = running_canary(database_url, name, channel)
    if canary is None:
        return CallPin(found)
    engine = _engine(database_url)
    with engine.begin() as conn:
        had = conn.execute(select(CC.c.side, CC.c.canary_id).where(CC.c.call_id == call_id)).first()
        if had is not None and had.canary_id == canary.canary_id:
            side: Side = "candidate" if had.side == "candidate" else "baseline"
        else:
            side = side_for(canary.canary_id, key or call_id, canary.percent)
            stmt = _insert_for(engine, CC).values(
                call_id=call_id, canary_id=canary.canary_id, side=side, at=time.time()
            )
            conn.execute(stmt.on_conflict_do_nothing(index_elements=[CC.c.call_id]))
    version = canary.candidate if side == "candidate" else canary.baseline
    pinned = flow_store.get_version(database_url, name, version)
    if pinned is None:  # a version is never deleted; a database edited by hand says so
        raise flow_store.FlowRefError(
            f"canary {canary.canary_id} names {name}@{version}, which is not published"
        )
    return CallPin(pinned, canary.canary_id, side)


def campaign_split(
    database_url: str, ref: str
) -> tuple[Canary, flow_store.PublishedVersion, FlowDefinition] | None:
    """The canary running on the channel a campaign's ``ref`` names (``NAME``,
    ``NAME@CHANNEL``), with its candidate's version and definition; None for an exact
    version, a file or a channel without one. The campaign's workflow splits its contacts by
    it (``CampaignInput.flow_for``), as :func:`resolve_call` splits other calls."""
    name, _, tail = ref.partition("@")
    found = flow_store.resolve(database_url, ref)
    if tail and flow_store.VERSION_RE.fullmatch(tail) and tail == found.version:
        return None
    canary = running_canary(database_url, name, tail or flow_store.DEFAULT_CHANNEL)
    if canary is None:
        return None
    cand = flow_store.get_version(database_url, name, canary.candidate)
    if cand is None:
        raise flow_store.FlowRefError(
            f"canary {canary.canary_id} names {name}@{canary.candidate}, which is not published"
        )
    return canary, cand, flow_store.load_definition(database_url, name, canary.candidate)


def definition_for(
    database_url: str, ref: str, call_id: str | None = None
) -> tuple[FlowDefinition, flow_store.PublishedVersion]:
    """The published definition and version a name reference (``NAME``, ``NAME@VERSION``,
    ``NAME@CHANNEL``) gives: for a new call (``call_id``) through :func:`resolve_call`, so a
    running canary picks its side; otherwise plain :func:`flow_store.resolve`. The one
    resolution the CLI and the API share; ``flow_store.FlowRefError`` if nothing matches."""
    found = (
        flow_store.resolve(database_url, ref)
        if call_id is None
        else resolve_call(database_url, ref, call_id).version
    )
    return flow_store.load_definition(database_url, found.name, found.version), found


def side_stats(database_url: str, canary_id: str) -> tuple[SideStats, SideStats]:
    """The candidate's and the baseline's ended calls, summed: how each ended, how long it
    lasted, and the function calls its flow refused (``CallRecord.refused``)."""
    sides = {"candidate": SideStats(), "baseline": SideStats()}
    query = (
        select(
            CC.c.side,
            CALLS.c.end_reason,
            CALLS.c.disposition,
            CALLS.c.started_at,
            CALLS.c.ended_at,
            CALLS.c.refused,
        )
        .join(CALLS, CALLS.c.call_id == CC.c.call_id)
        .where(CC.c.canary_id == canary_id, CALLS.c.ended_at.is_not(None))
    )
    with _engine(database_url).connect() as conn:
        for row in conn.execute(query):
            if row.side not in sides:
                continue
            length = max((row.ended_at - row.started_at).total_seconds(), 0.0)
            sides[row.side] = sides[row.side].add(row.end_reason, row.disposition, length, row.refused or 0)
    return sides["candidate"], sides["baseline"]


def settle(
    database_url: str,
    canary_id: str,
    decision: Literal["promote", "rollback"],
    reason: str,
    now: float | None = None,
) -> Canary:
    """Promote (the channel moves to the candidate) or roll back (it stays); either way new
    calls stop being split. Settling a settled canary changes nothing (an activity retry)."""
    canary = get_canary(database_url, canary_id)
    if canary is None:
        raise CanaryError(f"no canary {canary_id[:200]}")
    if canary.state != "running":
        return canary
    if decision == "promote":
        flow_store.promote(database_url, canary.name, canary.candidate, canary.channel, now)
    at = time.time() if now is None else now
    state: CanaryState = "promoted" if decision == "promote" else "rolled_back"
    with _engine(database_url).begin() as conn:
        conn.execute(
            update(C)
            .where(C.c.canary_id == canary_id, C.c.state == "running")
            .values(state=state, reason=reason[:4000], decided_at=at)
        )
    found = get_canary(database_url, canary_id)
    assert found is not None
    return found


class SettleRequest(BaseModel):
    canary_id: str
    decision: Literal["promote", "rollback"]
    reason: str


class SideOutcomes(BaseModel):
    candidate: SideStats
    baseline: SideStats


class CanaryActivities:
    """The canary workflow's reads and its one write, on the database the versions are in."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url

    def all(self) -> list[object]:
        return [self.canary_outcomes, self.canary_settle]

    @activity.defn(name="canary_outcomes")
    async def canary_outcomes(self, canary_id: str) -> SideOutcomes:
        cand, base = await asyncio.to_thread(side_stats, self.database_url, canary_id)
        return SideOutcomes(candidate=cand, baseline=base)

    @activity.defn(name="canary_settle")
    async def canary_settle(self, req: SettleRequest) -> str:
        done = await asyncio.to_thread(settle, self.database_url, req.canary_id, req.decision, req.reason)
        return done.state
