"""Pipecat Flows visual editor exports (``{meta, nodes: [...], edges}``) to Ringflow.

The editor stores each node's NodeConfig under ``data`` and routes by each
function's ``next_node_id``; its ``edges`` only draw those routes, so they are read
for nothing but a warning when one shows a route no function takes. Decisions run
Python code to pick a route: the code cannot be carried, so the LLM is given one
transition per route instead, and the user is told to review them.
"""

from __future__ import annotations

from typing import Any

from ringflow.callflow.importers._common import (
    DocPath,
    FlowImportError,
    ImportResult,
    Names,
    Warnings,
    as_dict,
    flow_name,
    label,
    node_id,
    text,
    variables_from_defaults,
    wrong_type,
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

TYPES = {"initial": "agent", "node": "agent", "llm_task": "agent", "end": "end"}
DATA_KEYS = {
    "label",
    "role_message",
    "role_messages",
    "task_messages",
    "functions",
    "pre_actions",
    "post_actions",
    "context_strategy",
    "respond_immediately",
}
TOP_KEYS = {"$schema", "$id", "meta", "context", "global_functions", "nodes", "edges"}


class _Importer:
    def __init__(self, data: dict[str, Any], lenient: bool = False) -> None:
        if not isinstance(data.get("nodes"), list):
            raise FlowImportError("not a Pipecat Flows editor export: 'nodes' must be a list of nodes")
        self.data = data
        self.lenient = lenient
        self.w = Warnings()
        self.ids: dict[str, str] = {}  # editor node id -> Ringflow node id
        self.raw: dict[str, tuple[DocPath, str, dict[str, Any]]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.origin: dict[str, DocPath] = {}
        self.routes: set[tuple[str, str]] = set()
        self.start: str | None = None

    def resolve(self, target: Any) -> str | None:
        return self.ids.get(target) if isinstance(target, str) else None

    def run(self) -> ImportResult:
        names = Names()
        for i, raw in enumerate(self.data["nodes"]):
            self.declare(i, raw, names)
        if not self.raw:
            raise FlowImportError("the Pipecat Flows export has no usable nodes")
        roles: dict[str, str] = {}
        role_paths: dict[str, DocPath] = {}
        for nid, (path, kind, data) in self.raw.items():
            self.nodes[nid] = self.node(nid, path, kind, data)
            role, role_paths[nid] = node_role(data, (*path, "data"), self.w, f"node '{nid}'")
            if role:
                roles[nid] = role
        start = self.start or next(iter(self.nodes))
        if self.start is None:
            self.w.add(("nodes",), f"no node of type 'initial'; '{start}' is the start node")
        for key in sorted(k for k in self.data if k not in TOP_KEYS):
            self.w.add((key,), f"top-level key '{label(key)}' not carried")
        self.check_edges()
        meta = as_dict(self.data.get("meta"))
        draft = FlowDraft(
            name=flow_name(meta.get("name")),
            description=text(meta.get("description")),
            warnings=self.w,
            nodes=self.nodes,
            start=start,
            origin=self.origin,
            variables=variables_from_defaults(self.data.get("context"), ("context",), self.w),
            global_functions=self.global_functions(),
        )
        draft.role = fold_roles(
            self.nodes, roles, start, self.w, lambda n: self.origin[n], draft.global_functions
        )
        draft.role_origin = role_paths[start]
        self.w.refuse_broken(self.lenient, UNKNOWN_TARGETS)
        return finish(draft)

    def declare(self, i: int, raw: Any, names: Names) -> None:
        """First pass: ids, so that functions can name nodes that come later."""
        path: DocPath = ("nodes", i)
        if not isinstance(raw, dict):
            self.w.add(path, f"node is {type(raw).__name__}, not an object; not carried")
            return
        src, kind = raw.get("id"), raw.get("type")
        if kind is not None and not isinstance(kind, str):
            raise wrong_type((*path, "type"), "a node's type", "a string such as 'node'", kind)
        data = as_dict(raw.get("data"))
        if not isinstance(src, str) or src in self.ids:
            self.w.add(path, f"node {label(src)}: missing or repeated id; not carried")
            return
        nid = names.claim(node_id(src) or node_id(data.get("label")) or "node")
        if nid != src:
            self.w.add(path, f"node '{src}' renamed '{nid}' (node ids are lower_snake_case)")
        if kind not in TYPES:
            self.w.add(path, f"node '{src}' has unknown type {label(kind)}; imported as an agent node")
        if kind == "initial" and self.start is not None:
            self.w.add(path, f"node '{src}': a second 'initial' node; '{self.start}' stays the start")
        elif kind == "initial":
            self.start = nid
        self.ids[src] = nid
        self.origin[nid] = path
        self.raw[nid] = (path, str(kind), data)

    def node(self, nid: str, path: DocPath, kind: str, data: dict[str, Any]) -> dict[str, Any]:
        owner = f"node '{nid}'"
        dpath = (*path, "data")
        task = join_messages(data.get("task_messages"), (*dpath, "task_messages"), self.w, owner)
        if task is None:
            task = "Say goodbye politely." if kind == "end" else "Continue the conversation."
            self.w.add(path, f"{owner} has no task_messages; task set to '{task}'")
        node: dict[str, Any] = {"type": TYPES.get(kind, "agent"), "task": task}
        if isinstance(data.get("respond_immediately"), bool):
            node["respond_immediately"] = data["respond_immediately"]
        node["context"] = context_strategy(
            data.get("context_strategy"), (*dpath, "context_strategy"), self.w, owner
        )
        node["functions"] = self.functions(nid, data.get("functions"), (*dpath, "functions"))
        for key in ("pre_actions", "post_actions"):
            node[key] = convert_actions(data.get(key), (*dpath, key), self.w, owner)
        for key in sorted(k for k in data if k not in DATA_KEYS):
            self.w.add(dpath, f"{owner}: setting '{label(key)}' not carried")
        return node

    def functions(self, nid: str, raw: Any, path: DocPath) -> list[dict[str, Any]]:
        if raw is None:
            return []
        if not isinstance(raw, list):
            self.w.add(path, f"node '{nid}': functions is not a list; not carried")
            return []
        out: list[dict[str, Any]] = []
        for i, fn in enumerate(raw):
            fpath = (*path, i)
            if not isinstance(fn, dict):
                self.w.add(fpath, f"node '{nid}': function is not an object; not carried")
                continue
            decided = fn.get("decision") is not None
            target = None if decided else fn.get("next_node_id")
            entry = build_function(fn, target, fpath, self.w, f"node '{nid}'", self.resolve)
            if entry is None:
                continue
            out.append(entry)
            if "transition_to" in entry:
                self.routes.add((nid, entry["transition_to"]))
            if decided:
                out.extend(
                    self.decision(
                        nid, entry, fn.get("decision"), fn.get("next_node_id"), (*fpath, "decision")
                    )
                )
        return out

    def decision(
        self, nid: str, entry: dict[str, Any], decision: Any, fallback: Any, path: DocPath
    ) -> list[dict[str, Any]]:
        """One LLM-chosen transition per route the decision code could take."""
        name = entry["name"]
        decision = decision if isinstance(decision, dict) else {}
        routes: list[tuple[Any, str]] = []
        conditions = decision.get("conditions")
        if conditions is not None and not isinstance(conditions, list):
            raise wrong_type((*path, "conditions"), "a decision's conditions", "a list", conditions)
        for cond in conditions or []:
            if isinstance(cond, dict):
                rule = f"its result {label(cond.get('operator'))} {label(cond.get('value'))}"
                routes.append((cond.get("next_node_id"), rule))
        routes.append((decision.get("default_next_node_id") or fallback, "no condition held"))
        out: list[dict[str, Any]] = []
        added: list[str] = []
        for target, rule in routes:
            dest = self.resolve(target)
            if dest is None and target is not None:
                self.w.add_broken(
                    path,
                    f"node '{nid}': function '{name}' decides to go to unknown node "
                    f"{label(target)} when {rule}; that route not carried",
                )
            if dest is None or dest in added:
                continue
            added.append(dest)
            self.routes.add((nid, dest))
            out.append(
                {
                    "name": f"{name}_to_{dest}"[:64],
                    "transition_only": True,
                    "description": f"After {name}: go to {dest}. The source flow's decision "
                    f"code chose this when {rule}.",
                    "transition_to": dest,
                }
            )
        self.w.add(
            path,
            f"node '{nid}': function '{name}' has a decision (Python code) that is "
            f"not carried; '{name}' records its arguments and the LLM now chooses "
            f"between {', '.join(added) or 'no known node'}; review these transitions",
        )
        return out

    def global_functions(self) -> list[dict[str, Any]]:
        raw = self.data.get("global_functions")
        if raw is None:
            return []
        if not isinstance(raw, list):
            self.w.add(("global_functions",), "global_functions is not a list; not carried")
            return []
        out = []
        for i, fn in enumerate(raw):
            path: DocPath = ("global_functions", i)
            if not isinstance(fn, dict):
                self.w.add(path, "global function is not an object; not carried")
                continue
            decided = fn.get("decision") is not None
            if decided:
                self.w.add(path, "global function: decision (Python code) not carried")
            entry = build_function(
                fn, None if decided else fn.get("next_node_id"), path, self.w, "global", self.resolve
            )
            if entry is not None:
                out.append(entry)
        return out

    def check_edges(self) -> None:
        edges = self.data.get("edges")
        for i, edge in enumerate(edges if isinstance(edges, list) else []):
            if not isinstance(edge, dict):
                continue
            src, dst = self.resolve(edge.get("source")), self.resolve(edge.get("target"))
            if src is None or dst is None or (src, dst) not in self.routes:
                self.w.add(
                    ("edges", i),
                    f"edge {label(edge.get('id'))} from "
                    f"{label(edge.get('source'))} to {label(edge.get('target'))} "
                    "is not backed by a function's next_node_id; not carried",
                )


def import_pipecat_editor(data: Any, lenient: bool = False) -> ImportResult:
    """Convert a parsed Pipecat Flows editor export."""
    if not isinstance(data, dict):
        raise FlowImportError(f"a Pipecat Flows export is a JSON object, not {type(data).__name__}")
    return _Importer(data, lenient).run()
