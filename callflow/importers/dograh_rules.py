"""The rules Dograh checks before it publishes a workflow, checked on an export.

Dograh's editor refuses to publish a graph with an edge into its start node, an edge
into or out of a webhook node, two start nodes... A file that breaks them was never
a working Dograh agent, so importing it would hand the user a flow whose meaning
nobody knows; it is refused with Dograh's own wording for each broken rule, and
``--lenient`` imports it anyway with those as warnings. The rules mirror Dograh's
node specs (how many of a type, edges in and out of each type), its edge schema
(a label and a condition) and its edge references; what Dograh accepts stays
importable, and what Ringflow cannot carry of it is reported by the importer.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ringflow.callflow.errors import Issue, join_path
from ringflow.callflow.importers._common import DocPath, label, text


@dataclass(frozen=True)
class _Spec:
    name: str
    min_in: int | None = None
    max_in: int | None = None
    max_out: int | None = None
    min_count: int | None = None
    max_count: int | None = None
    prompt: str | None = None  # the word in "Prompt is required for <word> nodes"


SPECS = {
    "startCall": _Spec("Start Call", max_in=0, min_count=1, max_count=1, prompt="start"),
    "agentNode": _Spec("Agent Node", min_in=1, prompt="agent"),
    "endCall": _Spec("End Call", min_in=1, max_out=0, prompt="end"),
    "globalNode": _Spec("Global Node", max_in=0, max_out=0, max_count=1, prompt="global"),
    "trigger": _Spec("API Trigger", max_in=0, max_count=1),
    "webhook": _Spec("Webhook", max_in=0, max_out=0),
    "qa": _Spec("QA Analysis", max_in=0, max_out=0),
}


def tool_name(value: str) -> str:
    """The tool name Dograh gives an edge: two labels with the same one clash."""
    return re.sub(r"[^a-z0-9]", "_", value.lower())


def _key(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    return str(value)


class _Check:
    def __init__(self, graph: dict[str, Any], root: DocPath) -> None:
        self.root = root
        self.issues: list[Issue] = []
        nodes = graph.get("nodes")
        edges = graph.get("edges")
        self.nodes = [
            (i, n) for i, n in enumerate(nodes if isinstance(nodes, list) else []) if isinstance(n, dict)
        ]
        self.edges = [
            (i, e) for i, e in enumerate(edges if isinstance(edges, list) else []) if isinstance(e, dict)
        ]
        self.types: dict[str, str] = {}
        self.where: dict[str, tuple[DocPath, str, dict[str, Any]]] = {}
        for i, node in self.nodes:
            nid, kind = _key(node.get("id")), node.get("type")
            if nid is not None and nid not in self.types and isinstance(kind, str):
                self.types[nid] = kind
                data = node.get("data")
                data = data if isinstance(data, dict) else {}
                name = text(data.get("name"))
                self.where[nid] = (("nodes", i), f"node '{label(name or '')}' (id {label(nid)})", data)

    def add(self, path: DocPath, what: str, message: str) -> None:
        self.issues.append(Issue(join_path((*self.root, *path)), f"{what}: {message}"))

    def run(self) -> list[Issue]:
        self.counts()
        self.prompts()
        links = self.links()
        self.degrees(links)
        return self.issues

    def counts(self) -> None:
        seen = Counter(self.types.values())
        for kind, spec in SPECS.items():
            n = seen.get(kind, 0)
            if spec.max_count is not None and n > spec.max_count:
                self.add(("nodes",), "workflow", f"Workflow can have at most one {spec.name}")
            if spec.min_count is not None and n < spec.min_count:
                self.add(("nodes",), "workflow", f"Workflow must have at least one {spec.name}")

    def prompts(self) -> None:
        for nid, kind in self.types.items():
            spec = SPECS.get(kind)
            if spec is None or spec.prompt is None:
                continue
            path, who, data = self.where[nid]
            if text(data.get("prompt")) is None:
                self.add(path, who, f"Prompt is required for {spec.prompt} nodes")

    def links(self) -> set[tuple[str, str]]:
        """Distinct (source, target) pairs between existing nodes, as Dograh counts them."""
        pairs: set[tuple[str, str]] = set()
        names: dict[tuple[str, str], list[tuple[int, str]]] = {}
        for i, edge in self.edges:
            path: DocPath = ("edges", i)
            what = f"edge {label(edge.get('id'))}"
            src, dst = _key(edge.get("source")), _key(edge.get("target"))
            missing = [
                label(e) for e in (edge.get("source"), edge.get("target")) if _key(e) not in self.types
            ]
            if missing:
                self.add(path, what, f"Edge references missing node {', '.join(missing)}")
            elif src is not None and dst is not None:
                pairs.add((src, dst))
            data = edge.get("data")
            data = data if isinstance(data, dict) else {}
            for key in ("label", "condition"):
                if not isinstance(data.get(key), str) or not data[key]:
                    self.add((*path, "data", key), what, f"an edge needs a {key} (text)")
            if src is not None and isinstance(data.get("label"), str) and data["label"]:
                names.setdefault((src, tool_name(data["label"])), []).append((i, what))
        for (_, name), clash in names.items():
            for i, what in clash if len(clash) > 1 else []:
                self.add(
                    ("edges", i, "data", "label"),
                    what,
                    f'Transition tool name "{name}" is duplicated for this node. Use a unique edge label.',
                )
        return pairs

    def degrees(self, pairs: set[tuple[str, str]]) -> None:
        out_deg = Counter(src for src, _ in pairs)
        in_deg = Counter(dst for _, dst in pairs)
        for nid, kind in self.types.items():
            spec = SPECS.get(kind)
            if spec is None:
                continue
            path, who, _ = self.where[nid]
            if spec.max_in == 0 and in_deg[nid]:
                self.add(path, who, f"{spec.name} cannot have incoming edges")
            if spec.min_in and in_deg[nid] < spec.min_in:
                self.add(path, who, f"{spec.name} must have at least {spec.min_in} incoming edge(s)")
            if spec.max_out == 0 and out_deg[nid]:
                self.add(path, who, f"{spec.name} cannot have outgoing edges")


def dograh_rule_breaks(graph: dict[str, Any], root: DocPath = ()) -> list[Issue]:
    """Every rule Dograh would refuse to publish ``graph`` for, with its path and wording."""
    return _Check(graph, root).run()
