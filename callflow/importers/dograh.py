"""Dograh workflow exports (``{name, workflow_definition: {nodes, edges}}``) to Ringflow.

Dograh draws a call as a React Flow graph: conversation nodes with prompts, and edges
whose label and condition tell the LLM when to move on. In Ringflow an edge is a
transition-only function on its source node, so each edge becomes one, named after
its label. Nodes that are not conversation stages (webhooks, QA, triggers) have no
Ringflow equivalent and are reported, not dropped silently.
"""

from __future__ import annotations

import re
from typing import Any

from ringflow.callflow.errors import Issue
from ringflow.callflow.importers._common import (
    DocPath,
    FlowImportError,
    ImportResult,
    Names,
    Warnings,
    as_dict,
    flow_name,
    function_name,
    label,
    node_id,
    text,
    var_type,
    variables_from_defaults,
    wrong_type,
)
from ringflow.callflow.importers._finish import FlowDraft, finish
from ringflow.callflow.importers.dograh_rules import dograh_rule_breaks

CONVERSATION = {"startCall": "agent", "agentNode": "agent", "endCall": "end"}
NOT_CARRIED = {
    "webhook": "webhooks run outside the conversation; configure them in Ringflow's deployment",
    "qa": "QA review runs after the call; Ringflow has no QA node",
    "trigger": "API triggers start calls; start Ringflow calls through its API",
}
# Node settings with no Ringflow equivalent: warn when they are switched on.
_UNSUPPORTED = {
    "tool_uuids": "tools",
    "document_uuids": "knowledge-base documents",
    "detect_voicemail": "voicemail detection",
    "delayed_start": "delayed start",
    "wait_for_user_response": "waiting for the caller to speak first",
    "pre_call_fetch_enabled": "pre-call data fetch",
    "extraction_prompt": "extraction prompt",
}
_CONTEXT_PATH = re.compile(r"\{\{\s*(?:initial_context|gathered_context)\.")
_LEGACY_FALLBACK = re.compile(r"\|\s*fallback\s*:")


def _template(value: str | None) -> str | None:
    """Dograh's ``{{initial_context.x}}`` and ``{{x | fallback:y}}`` in Ringflow's syntax.

    Call inputs and extracted values are plain names in Ringflow, and a fallback is
    written after a bare ``|``.
    """
    if value is None:
        return None
    return _LEGACY_FALLBACK.sub("| ", _CONTEXT_PATH.sub("{{", value))


class _Importer:
    def __init__(self, data: dict[str, Any], lenient: bool) -> None:
        graph: Any = data
        root: DocPath = ()
        if "workflow_definition" in data:
            graph, root = data["workflow_definition"], ("workflow_definition",)
        if not isinstance(graph, dict):
            raise FlowImportError("a Dograh export's 'workflow_definition' must be an object")
        if not isinstance(graph.get("nodes"), list):
            raise FlowImportError("not a Dograh workflow: 'nodes' must be a list of nodes")
        self.data, self.graph, self.lenient = data, graph, lenient
        self.w = Warnings(root)
        self.nodes: dict[str, dict[str, Any]] = {}
        self.origin: dict[str, DocPath] = {}
        self.by_source: dict[str, str] = {}  # Dograh node id -> Ringflow node id
        self.skipped: dict[str, str] = {}  # Dograh node id -> why it is not carried
        self.names = Names()
        self.start: str | None = None
        self.role: str | None = None
        self.role_origin: DocPath = ()

    def run(self) -> ImportResult:
        for i, raw in enumerate(self.graph["nodes"]):
            self.node(i, raw)
        self.rules()
        if not self.nodes:
            raise FlowImportError(
                "the Dograh workflow has no conversation nodes (startCall, agentNode or endCall)"
            )
        edges = self.graph.get("edges", [])
        if not isinstance(edges, list):
            self.w.add(("edges",), "'edges' is not a list; no transitions carried")
            edges = []
        fn_names: dict[str, Names] = {}
        for i, raw in enumerate(edges):
            self.edge(i, raw, fn_names)
        start = self.start or next(iter(self.nodes))
        if self.start is None:
            self.w.add(("nodes",), f"no startCall node; '{start}' is the start node")
        name = self.data.get("name")
        draft = FlowDraft(
            name=flow_name(name),
            warnings=self.w,
            nodes=self.nodes,
            start=start,
            origin=self.origin,
            role=self.role,
            role_origin=self.role_origin,
            description=f"Imported from the Dograh workflow '{name}'." if text(name) else None,
            variables=variables_from_defaults(
                self.data.get("template_context_variables"), ("template_context_variables",), Warnings()
            ),
        )
        return finish(draft)

    def rules(self) -> None:
        """Dograh's publish rules: refused, or with ``lenient`` a warning each."""
        breaks = dograh_rule_breaks(self.graph, self.w.root)
        if breaks and not self.lenient:
            lines = "\n  ".join(str(b) for b in breaks)
            raise FlowImportError(
                f"Dograh refuses to publish this workflow, so it is not imported "
                f"(--lenient imports it anyway):\n  {lines}"
            )
        for b in breaks:
            self.w.items.append(Issue(b.path, f"Dograh refuses to publish this: {b.message}", "warning"))

    def node(self, i: int, raw: Any) -> None:
        path: DocPath = ("nodes", i)
        if not isinstance(raw, dict):
            self.w.add(path, f"node is {type(raw).__name__}, not an object; not carried")
            return
        kind, src_id = raw.get("type"), raw.get("id")
        if kind is not None and not isinstance(kind, str):
            raise wrong_type(
                (*self.w.root, *path, "type"), "a node's type", "a string such as 'agentNode'", kind
            )
        data = as_dict(raw.get("data"))
        title = text(data.get("name"))
        who = f"node '{label(title or '')}' (id {label(src_id)}, type {label(kind)})"
        if (
            not isinstance(src_id, str | int)
            or isinstance(src_id, bool)
            or str(src_id) in self.skipped
            or str(src_id) in self.by_source
        ):
            self.w.add(path, f"{who} has a missing or repeated id; not carried")
            return
        src_id = str(src_id)
        if kind == "globalNode":
            self.global_node(path, who, data)
            self.skipped[src_id] = "a global node"
        elif kind in CONVERSATION:
            self.conversation(path, who, src_id, kind, data)
        else:
            why = NOT_CARRIED.get(kind, "unknown node type") if isinstance(kind, str) else "no type"
            self.w.add(path, f"{who} not carried: {why}")
            self.skipped[src_id] = f"a {label(kind)} node"

    def global_node(self, path: DocPath, who: str, data: dict[str, Any]) -> None:
        prompt = text(data.get("prompt"))
        if self.role is not None:
            self.w.add(path, f"{who}: a second global node; its prompt is appended to the role")
        if prompt:
            self.role = _template(f"{self.role}\n\n{prompt}" if self.role else prompt)
            self.role_origin = path

    def conversation(self, path: DocPath, who: str, src_id: str, kind: str, data: dict[str, Any]) -> None:
        base = node_id(data.get("name")) or node_id(f"node_{src_id}") or "node"
        nid = self.names.claim(base)
        if nid != base:
            self.w.add(path, f"{who}: another node has the same name; its id is '{nid}'")
        self.by_source[src_id] = nid
        self.origin[nid] = path
        task = text(data.get("prompt"))
        if task is None:
            task = "Say goodbye politely." if kind == "endCall" else "Continue the conversation."
            self.w.add(path, f"{who} has no prompt; task set to '{task}'")
        node: dict[str, Any] = {"type": CONVERSATION[kind], "task": _template(task)}
        greeting = text(data.get("greeting"))
        if greeting and data.get("greeting_type", "text") == "text":
            node["greeting"] = _template(greeting)
        elif greeting or data.get("greeting_recording_id"):
            self.w.add(path, f"{who}: recorded (audio) greeting not carried")
        if isinstance(data.get("allow_interrupt"), bool):
            node["allow_interrupt"] = data["allow_interrupt"]
        if data.get("add_global_prompt") is False:
            node["add_role"] = False
        node["extract"] = self.extract(path, who, data)
        for key, what in _UNSUPPORTED.items():
            if data.get(key) and (key != "extraction_prompt" or node["extract"]):
                self.w.add(path, f"{who}: {what} not carried")
        self.nodes[nid] = node
        if kind == "startCall" or (data.get("is_start") is True and self.start is None):
            if self.start is not None and kind == "startCall":
                self.w.add(path, f"{who}: a second start node; '{self.start}' stays the start")
            else:
                self.start = nid

    def extract(self, path: DocPath, who: str, data: dict[str, Any]) -> list[dict[str, Any]]:
        raw = data.get("extraction_variables")
        if not raw:
            return []
        if data.get("extraction_enabled") is False:
            self.w.add(path, f"{who}: extraction is switched off; its variables are not carried")
            return []
        if not isinstance(raw, list):
            self.w.add(path, f"{who}: extraction_variables is not a list; not carried")
            return []
        out: list[dict[str, Any]] = []
        names = Names()
        for j, var in enumerate(raw):
            vpath = (*path, "data", "extraction_variables", j)
            var = var if isinstance(var, dict) else {}
            name = function_name(var.get("name"))
            if not name or name in names.taken:
                self.w.add(
                    vpath,
                    f"{who}: extraction variable {label(var.get('name'))} has no "
                    "usable or unique name; not carried",
                )
                continue
            names.claim(name)
            kind = var_type(var.get("type")) or "string"
            if var_type(var.get("type")) is None:
                self.w.add(
                    vpath,
                    f"{who}: extraction variable '{name}' has type "
                    f"{label(var.get('type'))}; imported as a string",
                )
            desc = text(var.get("prompt")) or text(var.get("description")) or name.replace("_", " ")
            out.append({"name": name, "type": kind, "description": desc})
        return out

    def edge(self, i: int, raw: Any, fn_names: dict[str, Names]) -> None:
        path: DocPath = ("edges", i)
        if not isinstance(raw, dict):
            self.w.add(path, f"edge is {type(raw).__name__}, not an object; not carried")
            return
        eid = label(raw.get("id"))
        src, dst = str(raw.get("source")), str(raw.get("target"))
        for end in (src, dst):
            if end not in self.by_source:
                why = self.skipped.get(end, "an unknown node")
                self.w.add(
                    path, f"edge {eid} from {label(src)} to {label(dst)} not carried: {label(end)} is {why}"
                )
                return
        data = as_dict(raw.get("data"))
        source, target = self.by_source[src], self.by_source[dst]
        raw_label = data.get("label")
        if raw_label is not None and not isinstance(raw_label, str):
            self.w.add(
                path, f"edge {eid}: label {label(raw_label)} is not text; name derived from the target node"
            )
        base = function_name(raw_label) or f"to_{target}"[:64]
        name = fn_names.setdefault(source, Names()).claim(base)
        if isinstance(raw_label, str) and function_name(raw_label) and name != base:
            self.w.add(
                path, f"edge {eid}: label '{raw_label}' repeats on node '{source}'; function named '{name}'"
            )
        condition = text(data.get("condition")) or text(raw_label) or f"Move on to {target}."
        fn: dict[str, Any] = {
            "name": name,
            "transition_only": True,
            "description": _template(condition),
            "transition_to": target,
        }
        speech = text(data.get("transition_speech"))
        if speech and data.get("transition_speech_type", "text") == "text":
            fn["speech"] = _template(speech)
        elif speech or data.get("transition_speech_recording_id"):
            self.w.add(path, f"edge {eid}: recorded (audio) transition speech not carried")
        self.nodes[source].setdefault("functions", []).append(fn)


def import_dograh(data: Any, lenient: bool = False) -> ImportResult:
    """Convert a parsed Dograh workflow export (or a bare ``{nodes, edges}`` graph)."""
    if not isinstance(data, dict):
        raise FlowImportError(f"a Dograh workflow is a JSON object, not {type(data).__name__}")
    return _Importer(data, lenient).run()
