"""Published flow versions and their channels, in SQL (SQLite or PostgreSQL).

A version is immutable and content-addressed: its id is a hash of the flow definition (the
file it was loaded from aside) and of the handler modules it was published with, so
publishing the same content twice gives the same id and one row. A call names a version
(``ringflow.contract.flow_ref.FlowRef``) and the worker reads the definition back from here
(``ringflow/flow_codec.py``), which is safe to cache for ever: a version never changes.

Channels (``production``, ``canary``, any name) point at a version of a flow name and move
with ``flow promote``; a call resolves a channel once, when it starts, and keeps the version.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from sqlalchemy import JSON, Column, Engine, Text, select
from sqlmodel import Field, SQLModel

from ringflow.activities.persistence import _insert_for, get_engine
from ringflow.callflow.model import FLOW_NAME_PATTERN, FlowDefinition
from ringflow.callflow.subflow_handlers import module_keys
from ringflow.callflow.subflow_use import VersionSource
from ringflow.contract.flow_ref import FlowRef

DEFAULT_CHANNEL = "production"
CHANNEL_RE = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
VERSION_RE = re.compile(r"^[0-9a-f]{12}$")


class FlowVersionRow(SQLModel, table=True):
    """Table ``flow_versions``: one row per published content."""

    __tablename__ = "flow_versions"

    name: str = Field(primary_key=True, max_length=100)
    version: str = Field(primary_key=True, max_length=12)
    content: str = Field(sa_column=Column(Text, nullable=False))  # canonical JSON, no ``source``
    source: str | None = Field(default=None, max_length=1000)
    handlers: dict[str, str] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    flow_version: int = 1  # the flow's own ``version:`` field
    published_at: float = Field(default=0.0, index=True)


class FlowChannelRow(SQLModel, table=True):
    """Table ``flow_channels``: which version each channel of a flow name serves."""

    __tablename__ = "flow_channels"

    name: str = Field(primary_key=True, max_length=100)
    channel: str = Field(primary_key=True, max_length=40)
    version: str = Field(max_length=12)
    updated_at: float = 0.0


_TABLES = [FlowVersionRow.__table__, FlowChannelRow.__table__]  # type: ignore[attr-defined]
V = FlowVersionRow.__table__  # type: ignore[attr-defined]
CH = FlowChannelRow.__table__  # type: ignore[attr-defined]


class FlowRefError(ValueError):
    """A reference names no published version; the message says which and what exists."""


class PublishedVersion(BaseModel):
    name: str
    version: str
    flow_version: int
    handlers: dict[str, str]
    source: str | None
    published_at: float
    channels: list[str] = []

    @property
    def ref(self) -> FlowRef:
        return FlowRef(name=self.name, version=self.version, handlers=self.handlers)


_ready: set[str] = set()
_ready_lock = threading.Lock()


def engine_for(database_url: str) -> Engine:
    """The store's engine, its tables made once per process: two first uses at once (the
    API's concurrent requests) would both see no table and the second CREATE fail."""
    remember_store(database_url)
    engine = get_engine(database_url)
    with _ready_lock:
        if database_url not in _ready:
            SQLModel.metadata.create_all(engine, tables=_TABLES)
            _ready.add(database_url)
    return engine


def canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def content_of(definition: FlowDefinition | dict[str, Any]) -> str:
    """The definition's JSON without ``source`` (where a client loaded it from is not
    content: the same flow published from two checkouts is one version). Keys keep the
    model's order, not sorted: the order of ``nodes`` is content (the first is the start).
    By alias, as the payload converter writes it (a node's ``global``, not ``global_``): the
    codec compares this with what a payload carries."""
    data = (
        definition.model_dump(mode="json", by_alias=True)
        if isinstance(definition, FlowDefinition)
        else dict(definition)
    )
    data.pop("source", None)
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def content_id(content: str, handlers: dict[str, str]) -> str:
    digest = hashlib.sha256(canonical({"definition": content, "handlers": handlers}).encode())
    return digest.hexdigest()[:12]


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def handler_file(module: str, base_dir: Path) -> Path | None:
    """The file a handlers module is loaded from beside its flow (``callflow/handlers.py``)."""
    rel = Path(*module.split("."))
    for candidate in (base_dir / f"{rel}.py", base_dir / rel / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def handler_hashes(definition: FlowDefinition, base_dir: Path | None) -> dict[str, str]:
    """The sha256 of the flow's handlers module, as found beside the flow file, and of each
    used flow's, beside the used file (keyed ``<module>@<used file>``,
    ``callflow/subflow_handlers.py``); a module found on ``sys.path`` instead (an installed
    package) is recorded as ``""``: the worker then checks only that it has one."""
    out: dict[str, str] = {}
    for key, (module, rel) in module_keys(definition).items():
        folder = base_dir if base_dir is None or rel is None else (base_dir / rel).parent
        found = handler_file(module, folder) if folder is not None else None
        out[key] = file_hash(found) if found is not None else ""
    return out


def publish(
    database_url: str, definition: FlowDefinition, handlers: dict[str, str], now: float | None = None
) -> PublishedVersion:
    """Store the version (once: the same content is the same row) and return it."""
    content = content_of(definition)
    version = content_id(content, handlers)
    name = definition.flow.flow
    engine = engine_for(database_url)
    stmt = (
        _insert_for(engine, V)
        .values(
            name=name,
            version=version,
            content=content,
            source=definition.source,
            handlers=handlers,
            flow_version=definition.flow.version,
            published_at=time.time() if now is None else now,
        )
        .on_conflict_do_nothing(index_elements=[V.c.name, V.c.version])
    )
    with engine.begin() as conn:
        conn.execute(stmt)
    load_content(database_url, version)  # this process's cache: the codec reads it next
    found = get_version(database_url, name, version)
    assert found is not None
    return found


def named(definition: FlowDefinition, name: str | None) -> FlowDefinition:
    """The definition published under ``name`` (``--name``): the flow's own name becomes it,
    so its calls' ``RingflowFlow`` and records say the name it was published as."""
    if name is None or name == definition.flow.flow:
        return definition
    if not re.fullmatch(FLOW_NAME_PATTERN, name):
        raise FlowRefError(f"--name '{name[:100]}' is not a flow name (pattern {FLOW_NAME_PATTERN})")
    return definition.model_copy(update={"flow": definition.flow.model_copy(update={"flow": name})})


def version_source(database_url: str) -> VersionSource:
    """What ``use: NAME@VERSION`` (or ``NAME@CHANNEL``) on a ``subflow`` node reads: the
    published definition and its version id, from ``database_url``, only when such a
    reference is met (a flow using files needs no store)."""

    def read(ref: str) -> tuple[FlowDefinition, str]:
        try:
            found = resolve(database_url, ref)
            return load_definition(database_url, found.name, found.version), found.version
        except FlowRefError as exc:
            raise LookupError(str(exc)) from None

    return read


def publish_file(
    database_url: str, path: Path, name: str | None = None
) -> tuple[FlowDefinition, PublishedVersion]:
    """Load and validate a flow file (``FlowError`` if invalid), then publish it with the
    hashes of the handler modules beside it. Its subflows' content is part of the definition
    (``callflow/subflow_use.py``), hence of the version id; those it uses by NAME@VERSION are
    read from the same store."""
    from ringflow.callflow.loader import load_flow  # the flow's YAML stack, only where a file is read

    definition = named(load_flow(path, versions=version_source(database_url)), name)
    return definition, publish(database_url, definition, handler_hashes(definition, path.parent))


def _published(row: Any, channels: list[str]) -> PublishedVersion:
    return PublishedVersion(
        name=row.name,
        version=row.version,
        flow_version=row.flow_version,
        handlers=dict(row.handlers or {}),
        source=row.source,
        published_at=row.published_at,
        channels=channels,
    )


def _channels(conn: Any, name: str) -> dict[str, str]:
    return {r.channel: r.version for r in conn.execute(select(CH).where(CH.c.name == name))}


def get_version(database_url: str, name: str, version: str) -> PublishedVersion | None:
    engine = engine_for(database_url)
    with engine.connect() as conn:
        row = conn.execute(select(V).where(V.c.name == name, V.c.version == version)).first()
        if row is None:
            return None
        chans = sorted(c for c, v in _channels(conn, name).items() if v == version)
    return _published(row, chans)


def list_versions(database_url: str, name: str) -> list[PublishedVersion]:
    """Every version of ``name``, newest first, with the channels serving each."""
    engine = engine_for(database_url)
    with engine.connect() as conn:
        chans = _channels(conn, name)
        rows = conn.execute(
            select(V).where(V.c.name == name).order_by(V.c.published_at.desc(), V.c.version)
        ).all()
    return [_published(r, sorted(c for c, v in chans.items() if v == r.version)) for r in rows]


def list_names(database_url: str) -> list[str]:
    """Every flow name with a published version, in order (the console's list)."""
    with engine_for(database_url).connect() as conn:
        return list(conn.execute(select(V.c.name).distinct().order_by(V.c.name)).scalars())


def channels(database_url: str, name: str) -> dict[str, str]:
    with engine_for(database_url).connect() as conn:
        return _channels(conn, name)


def load_content(database_url: str, version: str) -> tuple[str, str | None] | None:
    """A version's canonical definition JSON and its source, by id alone (the codec's read)."""
    with engine_for(database_url).connect() as conn:
        row = conn.execute(select(V.c.content, V.c.source).where(V.c.version == version)).first()
    if row is None:
        return None
    remember_content(version, row.content, row.source)
    return row.content, row.source


def load_definition(database_url: str, name: str, version: str) -> FlowDefinition:
    found = load_content(database_url, version)
    if found is None or get_version(database_url, name, version) is None:
        raise FlowRefError(f"{name}@{version} is not published")
    content, source = found
    return FlowDefinition.model_validate({**json.loads(content), "source": source})


def promote(database_url: str, name: str, version: str, channel: str, now: float | None = None) -> None:
    """Point ``channel`` of ``name`` at ``version``; calls already started keep theirs."""
    if not CHANNEL_RE.fullmatch(channel):
        raise FlowRefError(
            f"channel '{channel[:40]}' is not a valid name (lower-case letters, digits, '-' and '_', "
            "starting with a letter, at most 40)"
        )
    if get_version(database_url, name, version) is None:
        raise FlowRefError(f"{name}@{version} is not published (see `ringflow flow versions {name}`)")
    engine = engine_for(database_url)
    at = time.time() if now is None else now
    stmt = _insert_for(engine, CH).values(name=name, channel=channel, version=version, updated_at=at)
    stmt = stmt.on_conflict_do_update(
        index_elements=[CH.c.name, CH.c.channel], set_={"version": version, "updated_at": at}
    )
    with engine.begin() as conn:
        conn.execute(stmt)


def is_file_ref(ref: str) -> bool:
    """A flow reference that is a file path rather than a name: it exists, or it reads like
    one (a suffix, a slash); flow names have neither."""
    return Path(ref).exists() or "/" in ref or ref.endswith((".yaml", ".yml", ".json"))


def resolve(database_url: str, ref: str) -> PublishedVersion:
    """``NAME`` (its ``production`` channel, else its newest version), ``NAME@VERSION`` or
    ``NAME@CHANNEL``; raises :class:`FlowRefError` naming what exists instead."""
    name, _, tail = ref.partition("@")
    if not name:
        raise FlowRefError(f"'{ref[:120]}' names no flow (expected NAME, NAME@VERSION or NAME@CHANNEL)")
    known = list_versions(database_url, name)
    if not known:
        raise FlowRefError(f"no version of flow '{name[:100]}' is published (`ringflow flow publish FILE`)")
    chans = channels(database_url, name)
    if not tail:
        version = chans.get(DEFAULT_CHANNEL, known[0].version)
    elif VERSION_RE.fullmatch(tail) and any(v.version == tail for v in known):
        version = tail
    elif tail in chans:
        version = chans[tail]
    else:
        listed = ", ".join(sorted(chans)) or "none"
        raise FlowRefError(
            f"'{tail[:60]}' is neither a published version nor a channel of flow '{name}' "
            f"(channels: {listed}; versions: `ringflow flow versions {name}`)"
        )
    return next(v for v in known if v.version == version)


# --- what this process knows: the databases it used, and the versions it read ------------
# A version never changes, so its content is kept for the life of the process (the codec's
# read on every decode of a call's input must not cost a query).
_stores: list[str] = []
_contents: dict[str, tuple[str, str | None]] = {}


def remember_store(database_url: str) -> None:
    if database_url not in _stores:
        _stores.append(database_url)


def known_stores() -> list[str]:
    """The databases this process used for versions, in the order of their first use
    (``remember_store`` again moves none)."""
    return list(_stores)


def forget_store(database_url: str) -> None:
    """Stop looking in a database (tests: one they made and took away)."""
    if database_url in _stores:
        _stores.remove(database_url)


def remember_content(version: str, content: str, source: str | None) -> None:
    _contents[version] = (content, source)


def cached_content(version: str) -> tuple[str, str | None] | None:
    return _contents.get(version)


def forget_contents() -> None:
    """Empty the process's cache (tests: the next read goes to the database)."""
    _contents.clear()
