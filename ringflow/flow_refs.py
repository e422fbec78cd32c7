"""A flow reference as the HTTP API takes it: a file, ``NAME``, ``NAME@VERSION`` or ``NAME@CHANNEL``.

The meaning is the CLI's (``docs/flow-versions.md``): a name or a pinned version is resolved
by the published store (``activities.flow_store.resolve``, the one resolution every caller
shares), a file is published on the fly. What differs is where a file may come from: the API
reads only files under its trusted flow directories (``RINGFLOW_FLOWS_DIR``, default the
working directory), so a reference never reaches outside them; the CLI reads any file its
user can. The directories' flows are also listed (:func:`catalogue`) for ``GET /v1/flows``
and the console.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ringflow.callflow.loader import read_file

if TYPE_CHECKING:
    from ringflow.activities.flow_store import PublishedVersion
    from ringflow.callflow.model import FlowDefinition

FLOW_SUFFIXES = (".yaml", ".yml", ".json")
MAX_FILES = 2000  # a directory scan stops here: a reference is not a crawl


class FlowRefError(LookupError):
    """A reference that names no flow; the message says what was looked for and what exists."""


@dataclass(frozen=True)
class FlowFile:
    name: str
    version: int
    path: Path


def flow_dirs(flows_dir: str | None) -> list[Path]:
    return [Path(p).resolve() for p in (flows_dir or ".").split(os.pathsep) if p]


def _inside(path: Path, dirs: list[Path]) -> bool:
    return any(path == d or d in path.parents for d in dirs)


def relative(path: Path, flows_dir: str | None) -> str:
    """The file as a reference names it: relative to the directory it is under."""
    for d in flow_dirs(flows_dir):
        if d in path.parents:
            return str(path.relative_to(d))
    return path.name


def catalogue(flows_dir: str | None) -> list[FlowFile]:
    """Every flow file under the directories: its name and version, read without its handlers."""
    found: list[FlowFile] = []
    seen = 0
    for base in flow_dirs(flows_dir):
        for path in sorted(base.rglob("*")):
            if path.suffix not in FLOW_SUFFIXES or any(
                p.startswith(".") for p in path.relative_to(base).parts
            ):
                continue
            seen += 1
            if seen > MAX_FILES:
                return found
            try:
                data, issues = read_file(path)
            except FileNotFoundError:
                continue
            if issues or not isinstance(data, dict) or not isinstance(data.get("flow"), str):
                continue
            if "nodes" not in data:  # a conversation script names its flow too
                continue
            version = data.get("version", 1)
            found.append(FlowFile(data["flow"], version if isinstance(version, int) else 1, path))
    return found


def is_file_ref(ref: str) -> bool:
    """A file rather than a name: a suffix or a slash, which flow names never have. Unlike the
    CLI's rule, whether a path exists in the API's working directory does not matter."""
    return ref.endswith(FLOW_SUFFIXES) or "/" in ref


def resolve_file(ref: str, flows_dir: str | None) -> Path:
    """The file under the trusted directories a file reference names; :class:`FlowRefError`
    for any other (outside them, or missing)."""
    dirs = flow_dirs(flows_dir)
    for base in dirs:
        path = (base / ref).resolve()
        if _inside(path, dirs) and path.is_file():
            return path
    raise FlowRefError(f"no flow file '{ref[:300]}' under {', '.join(str(d) for d in dirs)}")


def load_ref(
    ref: str, database_url: str, flows_dir: str | None, call_id: str | None = None
) -> tuple[FlowDefinition, PublishedVersion]:
    """The definition and the published version ``ref`` names; a file is published first (the
    same content is the same version). With ``call_id`` (a new call), a channel with a
    running canary sends the call to the candidate or the baseline, as the CLI's calls
    (``activities.flow_canaries.resolve_call``). Raises :class:`FlowRefError`, or the
    loader's ``FlowError`` for an invalid file."""
    from ringflow.activities import flow_canaries, flow_store

    if is_file_ref(ref):
        return flow_store.publish_file(database_url, resolve_file(ref, flows_dir))
    try:
        return flow_canaries.definition_for(database_url, ref, call_id)
    except flow_store.FlowRefError as exc:
        raise FlowRefError(str(exc)) from None


def load_version(
    database_url: str, name: str, flow_version: int, flows_dir: str | None
) -> FlowDefinition | None:
    """A flow by its name and its own ``version:`` number (what a call's record keeps): the
    newest published version with that number, else a file of the directories; None when
    neither exists or it does not load (the console then draws no graph)."""
    from ringflow.activities import flow_store
    from ringflow.callflow.errors import FlowError
    from ringflow.callflow.loader import load_flow

    try:
        for v in flow_store.list_versions(database_url, name):
            if v.flow_version == flow_version:
                return flow_store.load_definition(database_url, v.name, v.version)
        files = [f for f in catalogue(flows_dir) if f.name == name and f.version == flow_version]
        versions = flow_store.version_source(database_url)
        return load_flow(files[0].path, versions=versions) if files else None
    except (FlowError, flow_store.FlowRefError, FileNotFoundError):
        return None
