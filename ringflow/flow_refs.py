"""Finding a flow by reference for callers that cannot hand over a file: the HTTP API.

A reference is a file (relative to one of the trusted flow directories, ``RINGFLOW_FLOWS_DIR``,
default the working directory), a flow's ``NAME`` or ``NAME@VERSION`` (the file of the
directories whose ``flow:`` and ``version:`` match; the highest version for a bare name).
Only files under those directories are read: a reference never reaches outside them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ringflow.callflow.loader import load_flow, read_file
from ringflow.callflow.model import FlowDefinition

FLOW_SUFFIXES = (".yaml", ".yml", ".json")
MAX_FILES = 2000  # a directory scan stops here: a reference is not a crawl


class FlowRefError(LookupError):
    """A reference that names no flow; the message says what was looked for and where."""


@dataclass(frozen=True)
class FlowFile:
    name: str
    version: int
    path: Path


def flow_dirs(flows_dir: str | None) -> list[Path]:
    return [Path(p).resolve() for p in (flows_dir or ".").split(os.pathsep) if p]


def _inside(path: Path, dirs: list[Path]) -> bool:
    return any(path == d or d in path.parents for d in dirs)


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


def resolve(ref: str, flows_dir: str | None) -> Path:
    """The file a reference names; raises :class:`FlowRefError`."""
    dirs = flow_dirs(flows_dir)
    where = ", ".join(str(d) for d in dirs)
    if ref.endswith(FLOW_SUFFIXES) or "/" in ref:
        for base in dirs:
            path = (base / ref).resolve()
            if _inside(path, dirs) and path.is_file():
                return path
        raise FlowRefError(f"no flow file '{ref}' under {where}")
    name, _, version = ref.partition("@")
    files = [f for f in catalogue(flows_dir) if f.name == name]
    if not files:
        raise FlowRefError(f"no flow named '{name}' under {where}")
    if version:
        if not version.isdigit():
            raise FlowRefError(f"'{ref}': a version is a number (channels need published flows)")
        files = [f for f in files if f.version == int(version)]
        if not files:
            raise FlowRefError(f"flow '{name}' has no version {version} under {where}")
    return max(files, key=lambda f: f.version).path


def load_ref(ref: str, flows_dir: str | None) -> FlowDefinition:
    """The loaded flow; raises :class:`FlowRefError` or the loader's ``FlowError``."""
    return load_flow(resolve(ref, flows_dir))
