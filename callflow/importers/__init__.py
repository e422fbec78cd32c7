"""Importers: other tools' flow files as Ringflow flows.

Teams arrive with flows built in Dograh or Pipecat Flows; rebuilding them by hand is
where migrations stall. Each importer is a pure function from parsed JSON to a flow
dict plus warnings, so the CLI, the API and tests share one conversion and a user
sees exactly what did not carry over (code, webhooks, recordings) before running it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ringflow.callflow.importers._common import FlowImportError, ImportResult, flow_name
from ringflow.callflow.importers._yaml import to_yaml
from ringflow.callflow.importers.dograh import import_dograh
from ringflow.callflow.importers.pipecat_editor import import_pipecat_editor
from ringflow.callflow.importers.pipecat_legacy import import_pipecat_legacy
from ringflow.callflow.loader import MAX_FILE_BYTES, check_bounds

SOURCES = ("dograh", "pipecat", "pipecat-legacy")
# What each source is called when telling the user which format was detected; the
# second names are accepted by ``import_flow`` too, since they say what the files are.
SOURCE_NAMES = {
    "dograh": "Dograh workflow",
    "pipecat": "Pipecat Flows editor export",
    "pipecat-legacy": "Pipecat Flows config",
}
ALIASES = {"pipecat-editor": "pipecat", "pipecat-config": "pipecat-legacy"}
MAX_DEPTH = 60
MAX_ELEMENTS = 200_000
# The same cap as a flow file: what comes out is a flow of about the input's size.
MAX_TEXT = MAX_FILE_BYTES

_IMPORTERS: dict[str, Callable[[Any, bool], ImportResult]] = {
    "dograh": import_dograh,
    "pipecat": import_pipecat_editor,
    "pipecat-legacy": import_pipecat_legacy,
}


def import_flow(source: str, data: object, *, name: str | None = None, lenient: bool = False) -> ImportResult:
    """Convert parsed JSON from ``source`` (one of :data:`SOURCES`) into a Ringflow flow.

    ``name`` overrides the flow name, for sources that carry none (a FlowConfig file
    is usually named only by its file name). Raises :class:`FlowImportError` when the
    data is not of that kind at all, or breaks a rule its own tool enforces before
    using it (Dograh refuses to publish a workflow with an edge into its start node;
    Pipecat Flows fails on a function whose node does not exist); ``lenient`` turns the
    latter into warnings. Anything smaller is a warning.
    """
    if isinstance(source, str):
        source = ALIASES.get(source, source)
    importer = _IMPORTERS.get(source) if isinstance(source, str) else None
    if importer is None:
        raise FlowImportError(f"unknown source {source!r}: expected one of {', '.join(SOURCES)}")
    problem = _too_big(data)
    if problem:
        raise FlowImportError(f"not a {source} flow: {problem}")
    result = importer(data, lenient)
    if name is not None:
        result.flow["flow"] = flow_name(name, default=result.flow["flow"])
    return result


def _too_big(data: object) -> str | None:
    """Refuse absurd nesting or size up front: no flow has it, and the converted flow
    must stay within what the validator accepts (it gains a level or two)."""
    problem = check_bounds(data, MAX_DEPTH, MAX_ELEMENTS)
    if problem is None and _text_size(data) > MAX_TEXT:
        problem = f"holds more than {MAX_TEXT} characters of text; a flow may be at most that"
    return problem


def _text_size(data: object) -> int:
    """Characters of keys and strings: a few huge strings pass the element count."""
    total, stack = 0, [data]
    while stack and total <= MAX_TEXT:
        value = stack.pop()
        if isinstance(value, str):
            total += len(value)
        elif isinstance(value, dict):
            stack.extend(value.values())
            total += sum(len(k) for k in value if isinstance(k, str))
        elif isinstance(value, list):
            stack.extend(value)
    return total


def detect_source(data: object) -> str | None:
    """Guess the source of parsed JSON by its shape, so a CLI need not ask."""
    if not isinstance(data, dict):
        return None
    if "workflow_definition" in data:
        return "dograh"
    nodes = data.get("nodes")
    if isinstance(nodes, dict) and ("initial_node" in data or _node_configs(nodes)):
        return "pipecat-legacy"
    if isinstance(nodes, list):
        types = {n.get("type") for n in nodes if isinstance(n, dict) and isinstance(n.get("type"), str)}
        if types & {"startCall", "agentNode", "endCall", "globalNode"}:
            return "dograh"
        if "meta" in data or types & {"initial", "node", "llm_task", "end"}:
            return "pipecat"
        # no telling type: what the nodes hold (a node whose type is broken still has it)
        keys = {
            k for n in nodes if isinstance(n, dict) and isinstance(n.get("data"), dict) for k in n["data"]
        }
        if "prompt" in keys and not keys & _NODE_CONFIG_KEYS:
            return "dograh"
        if keys & _NODE_CONFIG_KEYS and "prompt" not in keys:
            return "pipecat"
    return None


_NODE_CONFIG_KEYS = {"task_messages", "messages", "role_message", "role_messages", "functions"}


def _node_configs(nodes: dict[Any, Any]) -> bool:
    """``{id: NodeConfig}`` without ``initial_node``: every value reads as a NodeConfig."""
    return bool(nodes) and all(isinstance(v, dict) and _NODE_CONFIG_KEYS & set(v) for v in nodes.values())


__all__ = [
    "ALIASES",
    "SOURCES",
    "SOURCE_NAMES",
    "FlowImportError",
    "ImportResult",
    "detect_source",
    "import_flow",
    "to_yaml",
]
