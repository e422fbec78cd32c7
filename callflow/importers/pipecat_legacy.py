"""Pipecat Flows config JSON (``{initial_node, global_functions, nodes: {id: NodeConfig}}``).

Pipecat Flows apps keep the whole graph in one JSON file: node configs with a role
(``role_message``, or the older ``role_messages``), ``task_messages`` and functions,
written flat (``{name, description, properties, required, handler, transition_to}``)
or in an LLM provider's format (OpenAI, Anthropic or Gemini), plus functions offered
on every node (``global_functions``). The graph carries over; handlers and transition
callbacks are Python code referenced by name, so they are reported instead. Pipecat
has no end-node type: a node that ends the conversation and offers no transition is
what Ringflow calls one.

Files from before Pipecat Flows 0.0.7 (its first editor's examples) have no
``transition_to``: a function with no handler that is named after a node *is* the
edge to that node, and is imported as one.
"""

from __future__ import annotations

from typing import Any

from ringflow.callflow.importers._common import (
    DocPath,
    FlowImportError,
    ImportResult,
    Names,
    Warnings,
    label,
    node_id,
)
from ringflow.callflow.importers._finish import FlowDraft, finish
from ringflow.callflow.importers._pipecat import (
    UNKNOWN_TARGETS,
    build_function,
    context_strategy,
    convert_actions,
    fold_roles,
    join_messages,
    node_role,
)

NODE_KEYS = {
    "name",
    "role_message",
    "role_messages",
    "task_messages",
    "messages",
    "functions",
    "pre_actions",
    "post_actions",
    "context_strategy",
    "respond_immediately",
}
TOP_KEYS = {"initial_node", "nodes", "global_functions"}


def _declarations(fn: dict[str, Any]) -> list[tuple[Any, DocPath]]:
    """The function definitions inside one entry, whatever the provider format."""
    if isinstance(fn.get("function"), dict):  # OpenAI
        return [(fn["function"], ("function",))]
    if "function_declarations" in fn:  # Gemini: several per entry
        decls = fn["function_declarations"]
        return (
            [(d, ("function_declarations", j)) for j, d in enumerate(decls)]
            if isinstance(decls, list)
            else [(None, ("function_declarations",))]
        )
    return [(fn, ())]  # Anthropic, or the flat FlowsFunctionSchema form


def _normalise(decl: dict[str, Any]) -> dict[str, Any]:
    schema = decl.get("parameters", decl.get("input_schema"))
    if not isinstance(schema, dict):
        schema = decl
    return {
        "name": decl.get("name"),
        "description": decl.get("description"),
        "properties": schema.get("properties"),
        "required": schema.get("required"),
    }


class _Importer:
    def __init__(self, data: dict[str, Any], lenient: bool = False) -> None:
        if not isinstance(data.get("nodes"), dict) or not data["nodes"]:
            raise FlowImportError(
                "not a Pipecat FlowConfig: 'nodes' must be a non-empty object "
                "mapping node names to node configs"
            )
        self.data = data
        self.lenient = lenient
        self.w = Warnings()
        self.ids: dict[str, str] = {}
        self.origin: dict[str, DocPath] = {}
        names = Names()
        for key in data["nodes"]:
            nid = names.claim(node_id(key) or "node")
            if nid != key:
                self.w.add(
                    ("nodes", key), f"node '{label(key)}' renamed '{nid}' (node ids are lower_snake_case)"
                )
            self.ids[key] = nid
            self.origin[nid] = ("nodes", key)

    def resolve(self, target: Any) -> str | None:
        return self.ids.get(target) if isinstance(target, str) else None

    def run(self) -> ImportResult:
        nodes: dict[str, dict[str, Any]] = {}
        roles: dict[str, str] = {}
        role_paths: dict[str, DocPath] = {}
        for key, raw in self.data["nodes"].items():
            nid, path = self.ids[key], self.origin[self.ids[key]]
            if not isinstance(raw, dict):
                self.w.add(
                    path,
                    f"node '{nid}' is {type(raw).__name__}, not an object; imported with a placeholder task",
                )
                raw = {}
            nodes[nid] = self.node(nid, path, raw)
            role, role_paths[nid] = node_role(raw, path, self.w, f"node '{nid}'")
            if role:
                roles[nid] = role
        initial = self.data.get("initial_node")
        start = self.resolve(initial)
        if start is None:
            start = next(iter(nodes))
            why = "no initial_node" if initial is None else f"initial_node {label(initial)} names no node"
            self.w.add(("initial_node",), f"{why}; '{start}' is the start node")
        for key in sorted(k for k in self.data if k not in TOP_KEYS):
            self.w.add((key,), f"top-level key '{label(key)}' not carried")
        draft = FlowDraft(
            name="imported",
            warnings=self.w,
            nodes=nodes,
            start=start,
            origin=self.origin,
            global_functions=self.global_functions(),
        )
        draft.role = fold_roles(nodes, roles, start, self.w, lambda n: self.origin[n], draft.global_functions)
        draft.role_origin = role_paths[start]
        self.w.refuse_broken(self.lenient, UNKNOWN_TARGETS)
        return finish(draft)

    def global_functions(self) -> list[dict[str, Any]]:
        """Functions offered on every node (FlowManager's ``global_functions``)."""
        raw = self.data.get("global_functions")
        if raw is None:
            return []
        if not isinstance(raw, list):
            self.w.add(("global_functions",), "global_functions is not a list; not carried")
            return []
        return self.entries("global", raw, ("global_functions",))

    def node(self, nid: str, path: DocPath, raw: dict[str, Any]) -> dict[str, Any]:
        owner = f"node '{nid}'"
        messages = raw.get("task_messages", raw.get("messages"))
        task = join_messages(messages, (*path, "task_messages"), self.w, owner)
        node: dict[str, Any] = {"task": task}
        if isinstance(raw.get("respond_immediately"), bool):
            node["respond_immediately"] = raw["respond_immediately"]
        node["context"] = context_strategy(
            raw.get("context_strategy"), (*path, "context_strategy"), self.w, owner
        )
        node["functions"] = self.functions(nid, raw.get("functions"), (*path, "functions"))
        for key in ("pre_actions", "post_actions"):
            node[key] = convert_actions(raw.get(key), (*path, key), self.w, owner)
        ends = any("end_conversation" in a for a in (*node["pre_actions"], *node["post_actions"]))
        moves = any("transition_to" in fn for fn in node["functions"])
        node["type"] = "end" if ends and not moves else "agent"
        if task is None:
            node["task"] = "Say goodbye politely." if node["type"] == "end" else "Continue the conversation."
            self.w.add(path, f"{owner} has no task_messages; task set to '{node['task']}'")
        for key in sorted(k for k in raw if k not in NODE_KEYS):
            self.w.add(path, f"{owner}: setting '{label(key)}' not carried")
        return node

    def functions(self, nid: str, raw: Any, path: DocPath) -> list[dict[str, Any]]:
        if raw is None:
            return []
        if not isinstance(raw, list):
            self.w.add(path, f"node '{nid}': functions is not a list; not carried")
            return []
        return self.entries(f"node '{nid}'", raw, path)

    def entries(self, owner: str, raw: list[Any], path: DocPath) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for i, fn in enumerate(raw):
            decls = _declarations(fn) if isinstance(fn, dict) else [(fn, ())]
            for decl, sub in decls:
                fpath = (*path, i, *sub)
                if not isinstance(decl, dict):
                    self.w.add(fpath, f"{owner}: function is not an object; not carried")
                    continue
                entry = self.function(owner, decl, fpath)
                if entry is not None:
                    out.append(entry)
        return out

    def function(self, owner: str, decl: dict[str, Any], path: DocPath) -> dict[str, Any] | None:
        target = decl.get("transition_to")
        if (
            target is None
            and all(decl.get(k) is None for k in ("handler", "transition_callback"))
            and self.resolve(decl.get("name")) is not None
        ):
            target = decl["name"]  # the convention before transition_to: the name is the edge
        entry = build_function(_normalise(decl), target, path, self.w, owner, self.resolve)
        if entry is None:
            return None
        for key, what in (("handler", "handler"), ("transition_callback", "transition callback")):
            if decl.get(key) is not None:
                kind = "capture" if entry.get("capture") else "transition"
                self.w.add(
                    path,
                    f"{owner}: function '{entry['name']}' {what} "
                    f"{label(decl[key])} (code) not carried; imported as a {kind}",
                )
        return entry


def import_pipecat_legacy(data: Any, lenient: bool = False) -> ImportResult:
    """Convert a parsed Pipecat Flows FlowConfig (static flow) JSON file."""
    if not isinstance(data, dict):
        raise FlowImportError(f"a Pipecat FlowConfig is a JSON object, not {type(data).__name__}")
    return _Importer(data, lenient).run()
