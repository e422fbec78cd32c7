"""Forgetting a call (``ringflow call forget``): what Ringflow holds of it outside Temporal,
found and erased, each part reported as erased, absent or not erased with why.

* the database: the call's row (record, analysis, recording fields) and its transcript turns;
* the recording object: ``file://`` unlinked, ``s3://`` deleted with the worker's
  ``RINGFLOW_RECORDING_S3_*`` keys (boto3), ``gs://`` with ``RINGFLOW_RECORDING_GCP_CREDENTIALS``
  (google-cloud-storage; ``STORAGE_EMULATOR_HOST`` points it at an emulator), ``azure://``
  with ``RINGFLOW_RECORDING_AZURE_*`` (azure-storage-blob); an object already gone is
  reported absent;
* the agent's turn journal in Redis, and the agent lease key;
* for ``--phone``, the person's campaign contact rows (``erase_contacts``).

Temporal's copy (the workflow's runs and their visibility records) is the CLI's part
(``ringflow/cli/forget.py``), which has the client.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from sqlalchemy import String, cast, or_, select

from ringflow.activities.persistence import CallRow, delete_call, get_engine, load_call
from ringflow.contract.ids import person_key
from ringflow.contract.journal import journal_key

LEASE_PREFIX = "ringflow:agent-lease:"  # agents/lease.py's keys


@dataclass
class Erasure:
    """What forgetting one call (or, with ``phone``, what a person has beyond their calls)
    did: each part with what became of it. ``kept`` is what is kept on purpose, with why
    (not a failure: ``not_erased`` is)."""

    call_id: str = ""
    erased: list[str] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)
    not_erased: dict[str, str] = field(default_factory=dict)  # part -> why
    kept: dict[str, str] = field(default_factory=dict)  # part -> why
    phone: str | None = None

    def as_dict(self) -> dict[str, Any]:
        who = {"call_id": self.call_id} if self.phone is None else {"phone": self.phone}
        return {
            **who,
            "erased": self.erased,
            "absent": self.absent,
            "not_erased": self.not_erased,
            "kept": self.kept,
        }


@dataclass(frozen=True)
class S3Keys:
    """The keys of the stores recordings are in (the worker's ``RINGFLOW_RECORDING_*``)."""

    access_key: str | None = None
    secret: str | None = None
    region: str | None = None
    endpoint: str | None = None
    force_path_style: bool = False
    gcp_credentials: str | None = None  # a service account's JSON
    azure_account: str | None = None
    azure_key: str | None = None
    azure_endpoint: str | None = None

    def __repr__(self) -> str:  # never the secrets
        return f"S3Keys(endpoint={self.endpoint!r}, region={self.region!r})"

    @classmethod
    def from_settings(cls, settings: Any) -> S3Keys:
        """The recording stores' keys of ``settings`` (``RINGFLOW_RECORDING_*``)."""

        def secret(value: Any) -> str | None:
            return value.get_secret_value() if value is not None else None

        return cls(
            settings.recording_s3_access_key,
            secret(settings.recording_s3_secret),
            settings.recording_s3_region,
            settings.recording_s3_endpoint,
            settings.recording_s3_force_path_style,
            gcp_credentials=secret(settings.recording_gcp_credentials),
            azure_account=settings.recording_azure_account,
            azure_key=secret(settings.recording_azure_key),
            azure_endpoint=settings.recording_azure_endpoint,
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


def phone_forms(phone: str) -> list[str]:
    """The number as given and in E.164 (``+1 (212) 555-0177`` is ``+12125550177``), the form
    the dialer and LiveKit write; a SIP URI or an odd number is looked for as given."""
    from ringflow.activities.campaign_rules import RuleError, normalize_phone

    given = phone.strip()
    try:
        e164 = normalize_phone(given)
    except RuleError:
        return [given]
    return sorted({given, e164})


def _like(text: str) -> str:
    """``text`` matched literally by LIKE (a SIP URI's ``_`` is no wildcard)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def calls_of_phone(database_url: str, phone: str) -> list[str]:
    """Every stored call of a person: a dialed call to that number or an inbound call from
    it (the record's line numbers), a campaign contact's calls (by its attempts), a journey's
    calls (their ids carry the person's key), and calls whose variables or state hold it."""
    from ringflow.activities.campaign_store import A, C, engine_for

    engine = engine_for(database_url)
    calls = CallRow.__table__  # type: ignore[attr-defined]
    forms = phone_forms(phone)
    held = [
        cast(col, String).like(f'%"{_like(form)}"%', escape="\\")
        for form in forms
        for col in (calls.c.variables, calls.c.state)
    ]
    journeys = [calls.c.call_id.like(f"%-{person_key(form)}-%") for form in forms]
    with engine.connect() as conn:
        by_contact = conn.execute(
            select(A.c.call_id)
            .join(C, (A.c.campaign_id == C.c.campaign_id) & (A.c.idx == C.c.idx))
            .where(C.c.phone.in_(forms))
        ).scalars()
        by_line = conn.execute(
            select(calls.c.call_id).where(
                or_(calls.c.caller_number.in_(forms), calls.c.called_number.in_(forms), *journeys, *held)
            )
        ).scalars()
        return sorted({*by_contact, *by_line})


def erase_contacts(database_url: str, phone: str, live: bool) -> Erasure:
    """A person's campaign contact rows: each one's number, variables and extracted values
    erased in place, and a contact still to be called taken out of its campaign (state
    ``forgotten``), so the campaign's counts and report keep their rows without the person.
    The do-not-call entry is kept: it is the person's own objection, which forgetting them
    must not undo. ``live``: one of their calls runs now; its outcome would write the
    contact again, so nothing is erased (forget again once it has ended)."""
    from sqlalchemy import update

    from ringflow.activities.campaign_store import ACTIVE, C, D, engine_for

    forms = phone_forms(phone)
    out = Erasure(phone=phone.strip())
    engine = engine_for(database_url)
    with engine.begin() as conn:
        rows = conn.execute(select(C.c.campaign_id, C.c.idx, C.c.state).where(C.c.phone.in_(forms))).all()
        if not rows:
            out.absent.append("campaign contacts")
        elif live or any(r.state == "dialing" for r in rows):  # claimed: its call is starting
            out.not_erased["campaign contacts"] = "a call of the number is live: forget it once it has ended"
        else:
            where = C.c.phone.in_(forms)
            conn.execute(update(C).where(where, C.c.state.in_(ACTIVE)).values(state="forgotten"))
            conn.execute(update(C).where(where).values(phone="", variables={}, extracted={}))
            campaigns = sorted({r.campaign_id for r in rows})
            out.erased.append(
                f"campaign contacts ({len(rows)} in {', '.join(campaigns)}): "
                "number, variables, extracted values"
            )
        if conn.execute(select(D.c.phone).where(D.c.phone.in_(forms))).first() is not None:
            out.kept["do-not-call entry"] = "it is the person's objection to being called"
    return out


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
        elif parts.scheme in DELETERS:
            found = DELETERS[parts.scheme](parts.netloc, unquote(parts.path.lstrip("/")), keys)
            (out.erased if found else out.absent).append(f"recording {location}")
        else:
            out.not_erased[f"recording {location}"] = (
                "Ringflow deletes file://, s3://, gs:// and azure:// recordings: "
                f"delete it in the {parts.scheme} store"
            )
    except Exception as exc:
        out.not_erased[f"recording {location}"] = f"{type(exc).__name__}: {exc}"[:300]


def _missing(package: str) -> RuntimeError:
    return RuntimeError(f"{package} is not installed (pip install 'ringflow[worker]')")


def _delete_s3(bucket: str, key: str, keys: S3Keys) -> bool:
    """True: deleted; S3 answers a delete of a missing key as done, so it is looked for first."""
    client = keys.client()  # a RuntimeError saying so without boto3
    from botocore.exceptions import ClientError  # type: ignore[import-untyped]

    try:
        client.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return False
        raise
    client.delete_object(Bucket=bucket, Key=key)
    return True


def _delete_gcs(bucket: str, key: str, keys: S3Keys) -> bool:
    """With the service account's JSON; on an emulator (``STORAGE_EMULATOR_HOST``, which
    Google's client reads itself) without credentials, as emulators take."""
    import json
    import os

    try:
        from google.api_core.exceptions import NotFound
        from google.auth.credentials import AnonymousCredentials
        from google.cloud.storage import Client as StorageClient  # type: ignore[import-untyped]
    except ImportError:
        raise _missing("google-cloud-storage") from None
    if keys.gcp_credentials:
        client = StorageClient.from_service_account_info(json.loads(keys.gcp_credentials))
    elif os.environ.get("STORAGE_EMULATOR_HOST"):
        client = StorageClient(project="ringflow", credentials=AnonymousCredentials())
    else:
        client = StorageClient()  # the machine's own (application default credentials)
    try:
        client.bucket(bucket).blob(key).delete()
    except NotFound:
        return False
    return True


def _delete_azure(container: str, key: str, keys: S3Keys) -> bool:
    try:
        from azure.core.exceptions import ResourceNotFoundError
        from azure.storage.blob import BlobServiceClient
    except ImportError:
        raise _missing("azure-storage-blob") from None
    if not keys.azure_account or not keys.azure_key:
        raise RuntimeError("RINGFLOW_RECORDING_AZURE_ACCOUNT and _KEY are not set")
    endpoint = keys.azure_endpoint or f"https://{keys.azure_account}.blob.core.windows.net"
    service = BlobServiceClient(
        endpoint, credential={"account_name": keys.azure_account, "account_key": keys.azure_key}
    )
    try:
        service.get_blob_client(container, key).delete_blob()
    except ResourceNotFoundError:
        return False
    return True


DELETERS: dict[str, Callable[[str, str, S3Keys], bool]] = {
    "s3": _delete_s3,
    "gs": _delete_gcs,
    "azure": _delete_azure,
}


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
