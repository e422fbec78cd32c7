"""Importers: other tools' flow files as Ringflow flows.

Teams arrive with flows built in Dograh or Pipecat Flows; rebuilding them by hand is
where migrations stall. Each importer is a pure function from parsed JSON to a flow
dict plus warnings, so the CLI, the API and tests share one conversion and a user
sees exactly what did not carry over (code, webhooks, recordings) before running it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from callflow.importers._common import FlowImportError, ImportResult, flow_name
from callflow.importers._yaml import to_yaml
from callflow.importers.dograh import import_dograh
from callflow.importers.pipecat_editor import import_pipecat_editor
from callflow.importers.pipecat_legacy import import_pipecat_legacy
from callflow.loader import check_bounds

SOURCES = ("dograh", "pipecat", "pipecat-legacy")
MAX_DEPTH = 60
MAX_ELEMENTS = 200_000

_IMPORTERS: dict[str, Callable[[Any], ImportResult]] = {
    "dograh": import_dograh,
    "pipecat": import_pipecat_editor,
    "pipecat-legacy": import_pipecat_legacy,
}


def import_flow(source: str, data: object, *, name: str | None = None) -> ImportResult:
    """Convert parsed JSON from ``source`` (one of :data:`SOURCES`) into a Ringflow flow.

    ``name`` overrides the flow name, for sources that carry none (a FlowConfig file
    is usually named only by its file name). Raises :class:`FlowImportError` when the
    data is not of that kind at all; anything smaller becomes a warning.
    """
    importer = _IMPORTERS.get(source) if isinstance(source, str) else None
    if importer is None:
        raise FlowImportError(f"unknown source {source!r}: expected one of {', '.join(SOURCES)}")
    problem = _too_big(data)
    if problem:
        raise FlowImportError(f"not a {source} flow: {problem}")
    result = importer(data)
    if name is not None:
        result.flow["flow"] = flow_name(name, default=result.flow["flow"])
    return result


def _too_big(data: object) -> str | None:
    """Refuse absurd nesting or size up front: no flow has it, and the converted flow
    must stay within what the validator accepts (it gains a level or two)."""
    return check_bounds(data, MAX_DEPTH, MAX_ELEMENTS)


def detect_source(data: object) -> str | None:
    """Guess the source of parsed JSON by its shape, so a CLI need not ask."""
    if not isinstance(data, dict):
        return None
    if "workflow_definition" in data:
        return "dograh"
    if "initial_node" in data and isinstance(data.get("nodes"), dict):
        return "pipecat-legacy"
    nodes = data.get("nodes")
    if isinstance(nodes, list):
        types = {n.get("type") for n in nodes if isinstance(n, dict)}
        if types & {"startCall", "agentNode", "endCall", "globalNode"}:
            return "dograh"
        if "meta" in data or types & {"initial", "node", "llm_task", "end"}:
            return "pipecat"
    return None


__all__ = ["SOURCES", "FlowImportError", "ImportResult", "detect_source", "import_flow", "to_yaml"]
