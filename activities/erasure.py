"""Forgetting a call (``ringflow call forget``): what Ringflow holds of it outside Temporal,
found and erased, each part reported as erased, absent or not erased with why.

* the database: the call's row (record, analysis, recording fields) and its transcript turns;
* the recording object: ``file://`` unlinked, ``s3://`` deleted with the worker's
  ``RINGFLOW_RECORDING_S3_*`` keys (boto3); ``gs://`` and ``azure://`` are reported as not
  erased (Ringflow holds no client for them: delete them in the bucket);
* the agent's turn journal in Redis, and the agent lease key.

Temporal's copy (the workflow's runs and their visibility records) is the CLI's part
(``ringflow/cli/forget.py``), which has the client.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from sqlalchemy import String, cast, or_, select

from ringflow.activities.persistence import CallRow, delete_call, get_engine, load_call
from ringflow.contract.journal import journal_key

LEASE_PREFIX = "ringflow:agent-lease:"  # agents/lease.py's keys


@dataclass
class Erasure:
    """What forgetting one call did: each part with what became of it."""

    call_id: str
    erased: list[str] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)
    not_erased: dict[str, str] = field(default_factory=dict)  # part -> why

    def as_dict(self) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "erased": self.erased,
            "absent": self.absent,
            "not_erased": self.not_erased,
        }


@dataclass(frozen=True)
class S3Keys:
    access_key: str | None = None
    secret: str | None = None
    region: str | None = None
    endpoint: str | None = None
    force_path_style: bool = False

    def __repr__(self) -> str:  # never the secret
        return f"S3Keys(endpoint={self.endpoint!r}, region={self.region!r})"

    @classmethod
    def from_settings(cls, settings: Any) -> S3Keys:
        """The recording store's keys of ``settings`` (``RINGFLOW_RECORDING_S3_*``)."""
        secret = settings.recording_s3_secret
        return cls(
            settings.recording_s3_access_key,
            secret.get_secret_value() if secret is not None else None,
            settings.recording_s3_region,
            settings.recording_s3_endpoint,
            settings.recording_s3_force_path_style,
        )

    def client(self) -> Any:
        """A boto3 S3 client with these keys (``RuntimeError`` without boto3)."""
        try:
            import boto3  # type: ignore[import-untyped]
            from botocore.config import Config  # type: ignore[import-untyped]
        except ImportError:
            raise RuntimeError("boto3 is not installed (pip install 'ringflow[worker]')") from None
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint or None,
            aws_access_key_id=self.access_key or None,
            aws_secret_access_key=self.secret or None,
            region_name=self.region or None,
            config=Config(s3={"addressing_style": "path" if self.force_path_style else "auto"}),
        )


def calls_of_phone(database_url: str, phone: str) -> list[str]:
    """Every stored call of a person: those of campaign contacts with that number (by their
    attempts), and those whose variables or state hold it (a dialed or inbound call's)."""
    from ringflow.activities.campaign_store import A, C, engine_for

    engine = engine_for(database_url)
    calls = CallRow.__table__  # type: ignore[attr-defined]
    pattern = f'%"{phone}"%'
    with engine.connect() as conn:
        by_contact = conn.execute(
            select(A.c.call_id)
            .join(C, (A.c.campaign_id == C.c.campaign_id) & (A.c.idx == C.c.idx))
            .where(C.c.phone == phone)
        ).scalars()
        by_values = conn.execute(
            select(calls.c.call_id).where(
                or_(cast(calls.c.variables, String).like(pattern), cast(calls.c.state, String).like(pattern))
            )
        ).scalars()
        return sorted({*by_contact, *by_values})


def recording_location(database_url: str, call_id: str) -> str | None:
    record = load_call(call_id, database_url=database_url, include_turns=False)
    return record.recording.location if record is not None and record.recording is not None else None


def erase_database(out: Erasure, database_url: str) -> None:
    get_engine(database_url)
    if load_call(out.call_id, database_url=database_url, include_turns=False) is None:
        out.absent.append("database record")
    delete_call(out.call_id, database_url=database_url)
    if load_call(out.call_id, database_url=database_url) is None:
        out.erased.append("database record and transcript turns")
    else:
        out.not_erased["database"] = "the row is still there after the delete"


def erase_recording(out: Erasure, location: str | None, keys: S3Keys) -> None:
    if not location:
        out.absent.append("recording")
        return
    parts = urlsplit(location)
    try:
        if parts.scheme == "file":
            path = Path(unquote(parts.path))
            if path.exists():
                path.unlink()
                out.erased.append(f"recording {location}")
            else:
                out.absent.append(f"recording {location}")
        elif parts.scheme == "s3":
            _delete_s3(parts.netloc, parts.path.lstrip("/"), keys)
            out.erased.append(f"recording {location}")
        else:
            out.not_erased[f"recording {location}"] = (
                f"Ringflow deletes file:// and s3:// recordings only: delete it in the {parts.scheme} bucket"
            )
    except Exception as exc:
        out.not_erased[f"recording {location}"] = f"{type(exc).__name__}: {exc}"[:300]


def _delete_s3(bucket: str, key: str, keys: S3Keys) -> None:
    keys.client().delete_object(Bucket=bucket, Key=key)


async def erase_redis(out: Erasure, redis_url: str | None) -> None:
    if not redis_url:
        out.absent.append("turn journal (no Redis configured)")
        return
    from redis.asyncio import Redis

    client = Redis.from_url(redis_url)
    try:
        removed = await client.delete(journal_key(out.call_id), f"{LEASE_PREFIX}{out.call_id}")
    except Exception as exc:
        out.not_erased["turn journal"] = f"{type(exc).__name__}: {exc}"[:300]
        return
    finally:
        await client.aclose()
    (out.erased if removed else out.absent).append("turn journal")
