"""API keys and idempotency records, in the database (``RINGFLOW_DATABASE_URL``).

A key is ``rfk_<id>_<secret>``: the id finds its row, the secret is stored only as its
SHA-256 (a 256-bit random secret needs no slow hash: nothing to guess from the digest), and
the whole key is shown once, when it is made. Every request reads the key's row, so a
revoked key is refused from the next request on, by every API process.

An idempotency record keeps the answer to a ``POST`` made with an ``Idempotency-Key``: the
same key (for the same API key) gets that answer again, never a second effect.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Column, DateTime, Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Field, Session, SQLModel, col, select

from ringflow.activities.persistence import get_engine
from ringflow.api.models import SCOPES

PREFIX = "rfk_"


class ApiKeyRow(SQLModel, table=True):
    """Table ``api_keys``: one row per key, its secret's digest only."""

    __tablename__ = "api_keys"

    id: str = Field(primary_key=True, max_length=32)
    name: str = Field(default="", max_length=200)
    digest: str = Field(max_length=64)
    scopes: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(sa_column=Column(DateTime(timezone=True), nullable=False))
    revoked_at: datetime | None = Field(
        default=None, sa_column=Column(DateTime(timezone=True), nullable=True)
    )


class IdempotencyRow(SQLModel, table=True):
    """Table ``api_idempotency``: the answer given to one ``Idempotency-Key`` of one API key."""

    __tablename__ = "api_idempotency"

    key_id: str = Field(primary_key=True, max_length=32)
    idem_key: str = Field(primary_key=True, max_length=255)
    fingerprint: str = Field(max_length=64)  # method, path and body of the first request
    status: int
    body: Any = Field(default=None, sa_column=Column(JSON, nullable=True))
    created_at: datetime = Field(sa_column=Column(DateTime(timezone=True), nullable=False))


_TABLES = [ApiKeyRow.__table__, IdempotencyRow.__table__]  # type: ignore[attr-defined]
_ready: set[str] = set()
_ready_lock = threading.Lock()


def engine(database_url: str) -> Engine:
    eng = get_engine(database_url)
    with _ready_lock:
        if database_url not in _ready:
            SQLModel.metadata.create_all(eng, tables=_TABLES)
            _ready.add(database_url)
    return eng


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class ScopeError(ValueError):
    """A scope the API does not know."""


@dataclass(frozen=True)
class KeyInfo:
    id: str
    name: str
    scopes: tuple[str, ...]
    created_at: datetime
    revoked_at: datetime | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "scopes": list(self.scopes),
            "created_at": self.created_at.isoformat(),
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
        }


def _info(row: ApiKeyRow) -> KeyInfo:
    return KeyInfo(row.id, row.name, tuple(row.scopes), row.created_at, row.revoked_at)


def check_scopes(scopes: list[str]) -> list[str]:
    known = ", ".join(SCOPES)
    if not scopes:
        raise ScopeError(f"no scope given; the scopes are {known}")
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown:
        raise ScopeError(f"unknown scope {', '.join(repr(s) for s in unknown)}; the scopes are {known}")
    return sorted(set(scopes))


def create_key(database_url: str, scopes: list[str], name: str = "") -> tuple[KeyInfo, str]:
    """A new key: its row, and the key itself (shown once, never stored)."""
    scopes = check_scopes(scopes)
    key_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    row = ApiKeyRow(id=key_id, name=name, digest=_digest(secret), scopes=scopes, created_at=datetime.now(UTC))
    with Session(engine(database_url)) as s:
        s.add(row)
        s.commit()
        s.refresh(row)
        info = _info(row)
    return info, f"{PREFIX}{key_id}_{secret}"


def verify(database_url: str, key: str) -> KeyInfo | None:
    """The key's row when the key is one of ours and not revoked; None otherwise."""
    if not key.startswith(PREFIX):
        return None
    key_id, sep, secret = key[len(PREFIX) :].partition("_")
    if not sep or not key_id or not secret or len(key_id) > 32:
        return None
    with Session(engine(database_url)) as s:
        row = s.get(ApiKeyRow, key_id)
        if row is None or row.revoked_at is not None:
            return None
        if not hmac.compare_digest(row.digest, _digest(secret)):
            return None
        return _info(row)


def revoke_key(database_url: str, key_id: str) -> KeyInfo | None:
    with Session(engine(database_url)) as s:
        row = s.get(ApiKeyRow, key_id.removeprefix(PREFIX).split("_", 1)[0])
        if row is None:
            return None
        if row.revoked_at is None:
            row.revoked_at = datetime.now(UTC)
            s.add(row)
            s.commit()
            s.refresh(row)
        return _info(row)


def list_keys(database_url: str) -> list[KeyInfo]:
    with Session(engine(database_url)) as s:
        return [_info(r) for r in s.exec(select(ApiKeyRow).order_by(col(ApiKeyRow.created_at)))]


def fingerprint(method: str, path: str, body: Any) -> str:
    raw = json.dumps([method, path, body], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(raw.encode()).hexdigest()


def recall(database_url: str, key_id: str, idem_key: str) -> IdempotencyRow | None:
    with Session(engine(database_url)) as s:
        row = s.get(IdempotencyRow, (key_id, idem_key))
        if row is not None:
            s.expunge(row)
        return row


def remember(
    database_url: str, key_id: str, idem_key: str, fp: str, status: int, body: Any
) -> IdempotencyRow:
    """Store an answer; when another request with the same key stored one first, that one."""
    row = IdempotencyRow(
        key_id=key_id,
        idem_key=idem_key,
        fingerprint=fp,
        status=status,
        body=body,
        created_at=datetime.now(UTC),
    )
    try:
        with Session(engine(database_url), expire_on_commit=False) as s:
            s.add(row)
            s.commit()
    except IntegrityError:
        first = recall(database_url, key_id, idem_key)
        assert first is not None
        return first
    return row
