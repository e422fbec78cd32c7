"""Turning an importer's draft into a flow that validates.

Each importer maps its source faithfully; the rules a source tool does not share
with Ringflow (end nodes have no transitions, every node must reach an end, tool
names are unique with the global ones, templates name declared values) are enforced
here once, so that all importers repair the same problems the same way and say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ringflow.callflow.importers._common import DocPath, ImportResult, Names, Warnings
from ringflow.callflow.importers._templates import TemplateFixer

FLOW_KEYS = (
    "flow",
    "version",
    "description",
    "role",
    "variables",
    "settings",
    "global_functions",
    "start",
    "nodes",
)
NODE_KEYS = (
    "type",
    "task",
    "greeting",
    "respond_immediately",
    "allow_interrupt",
    "add_role",
    "context",
    "extract",
    "functions",
    "pre_actions",
    "post_actions",
    "disposition",
)
FUNCTION_KEYS = ("name", "transition_only", "capture", "description", "parameters", "transition_to", "speech")
NODE_DEFAULTS = {"type": "agent", "respond_immediately": True, "allow_interrupt": True, "add_role": True}

END_TASK = "The conversation is over: thank the caller briefly and say goodbye."


@dataclass
class FlowDraft:
    """An imported flow before repair; ``origin`` maps node ids to source paths."""

    name: str
    warnings: Warnings
    nodes: dict[str, dict[str, Any]]
    start: str
    origin: dict[str, DocPath] = field(default_factory=dict)
    description: str | None = None
    role: str | None = None
    role_origin: DocPath = ()
    variables: dict[str, Any] = field(default_factory=dict)
    global_functions: list[dict[str, Any]] = field(default_factory=list)


def _targets(fn: dict[str, Any]) -> list[str]:
    t = fn.get("transition_to")
    if isinstance(t, str):
        return [t]
    if isinstance(t, dict):
        out = [v for v in (t.get("cases") or {}).values() if isinstance(v, str)]
        return out + ([t["default"]] if isinstance(t.get("default"), str) else [])
    return []


def _is_exit(node: dict[str, Any]) -> bool:
    actions = [*node.get("pre_actions", []), *node.get("post_actions", [])]
    return node.get("type") == "end" or any("end_conversation" in a for a in actions)


class _Repair:
    def __init__(self, d: FlowDraft) -> None:
        self.d = d

    def where(self, nid: str) -> DocPath:
        return self.d.origin.get(nid, ("nodes", nid))

    def end_transitions(self) -> None:
        """End nodes hang up; a transition out of one could never run, so it goes."""
        for nid, node in self.d.nodes.items():
            if node.get("type") != "end":
                continue
            kept = []
            for fn in node.get("functions", []):
                if not _targets(fn):
                    kept.append(fn)
                    continue
                if fn.get("capture"):
                    fn.pop("transition_to")
                    kept.append(fn)
                    what = "kept as a capture without its transition"
                else:
                    what = "not carried"
                self.d.warnings.add(
                    self.where(nid),
                    f"end node '{nid}': transition '{fn['name']}' "
                    f"is {what}; an end node may not have transitions",
                )
            node["functions"] = kept

    def name_clashes(self) -> None:
        """Tool names must be unique per node, the global functions included."""
        global_names = Names()
        for fn in self.d.global_functions:
            name = global_names.claim(fn["name"])
            if name != fn["name"]:
                self.d.warnings.add(
                    ("global_functions",),
                    f"global function '{fn['name']}' appears twice; the second is renamed '{name}'",
                )
                fn["name"] = name
        for nid, node in self.d.nodes.items():
            names = Names(global_names.taken)
            for fn in node.get("functions", []):
                name = names.claim(fn["name"])
                if name != fn["name"]:
                    self.d.warnings.add(
                        self.where(nid),
                        f"node '{nid}': function '{fn['name']}' "
                        f"clashes with another tool name; renamed '{name}'",
                    )
                    fn["name"] = name

    def adjacency(self) -> dict[str, set[str]]:
        global_targets = {t for fn in self.d.global_functions for t in _targets(fn)}
        adj: dict[str, set[str]] = {}
        for nid, node in self.d.nodes.items():
            own = {t for fn in node.get("functions", []) for t in _targets(fn)}
            if node.get("type", "agent") == "agent":
                own |= global_targets
            adj[nid] = {t for t in own if t in self.d.nodes}
        return adj

    def finishing(self) -> set[str]:
        adj = self.adjacency()
        done = {nid for nid, node in self.d.nodes.items() if _is_exit(node)}
        grew = True
        while grew:
            grew = False
            for nid, dsts in adj.items():
                if nid not in done and dsts & done:
                    done.add(nid)
                    grew = True
        return done

    def dead_ends(self) -> None:
        """A node from which no end can be reached would fail validation.

        A node with no way out of its own becomes an end node (that is what it does in
        the source tool: the call stops there). Cycles with no exit get a transition
        to one added end node, because guessing which node should end is worse.
        """
        dead = [n for n in self.d.nodes if n not in self.finishing()]
        sinks = [n for n in dead if not any(_targets(f) for f in self.d.nodes[n].get("functions", []))]
        for nid in sinks:
            self.d.nodes[nid]["type"] = "end"
            self.d.warnings.add(
                self.where(nid), f"node '{nid}' has no transition towards an end; imported as an end node"
            )
        dead = [n for n in self.d.nodes if n not in self.finishing()]
        if not dead:
            return
        end_id = Names(set(self.d.nodes)).claim("end_call")
        self.d.nodes[end_id] = {"type": "end", "task": END_TASK}
        taken = {fn["name"] for fn in self.d.global_functions}
        for nid in dead:
            node = self.d.nodes[nid]
            name = Names(taken | {f["name"] for f in node.get("functions", [])}).claim("end_call")
            node.setdefault("functions", []).append(
                {
                    "name": name,
                    "transition_only": True,
                    "transition_to": end_id,
                    "description": "The conversation is finished or the caller wants to end the call.",
                }
            )
            self.d.warnings.add(
                self.where(nid),
                f"node '{nid}' cannot reach an end node; added "
                f"transition '{name}' to a new end node '{end_id}'",
            )


def _ordered(value: dict[str, Any], keys: tuple[str, ...], defaults: dict[str, Any]) -> dict[str, Any]:
    out = {
        k: value[k]
        for k in keys
        if k in value and value[k] not in (None, [], {}) and defaults.get(k, ...) != value[k]
    }
    out.update({k: v for k, v in value.items() if k not in keys and v is not None})
    return out


def _node_out(node: dict[str, Any]) -> dict[str, Any]:
    node = dict(node)
    node["functions"] = [_ordered(fn, FUNCTION_KEYS, {}) for fn in node.get("functions", [])]
    return _ordered(node, NODE_KEYS, NODE_DEFAULTS)


def _fix_templates(d: FlowDraft, where: Any) -> None:
    extracted = {x["name"] for n in d.nodes.values() for x in n.get("extract", [])}
    fixer = TemplateFixer(d.variables, extracted, d.warnings)
    d.role = fixer.fix(d.role, d.role_origin, "role")

    def functions(fns: list[dict[str, Any]], path: DocPath, owner: str) -> None:
        for fn in fns:
            for key in ("description", "speech"):
                fn[key] = fixer.fix(fn.get(key), path, f"{owner} function '{fn['name']}' {key}")

    functions(d.global_functions, ("global_functions",), "global")
    for nid, node in d.nodes.items():
        path = where(nid)
        for key in ("task", "greeting"):
            node[key] = fixer.fix(node.get(key), path, f"node '{nid}' {key}")
        functions(node.get("functions", []), path, f"node '{nid}'")
        for key in ("pre_actions", "post_actions"):
            for action in node.get(key, []):
                for kind, value in action.items():
                    action[kind] = fixer.fix(value, path, f"node '{nid}' {key} {kind}")


def finish(d: FlowDraft) -> ImportResult:
    """Repair, then lay the flow out in the spec's key order."""
    if d.start in d.nodes:
        d.nodes = {d.start: d.nodes[d.start], **{k: v for k, v in d.nodes.items() if k != d.start}}
    r = _Repair(d)
    r.end_transitions()
    r.name_clashes()
    r.dead_ends()
    _fix_templates(d, r.where)
    flow = {
        "flow": d.name,
        "version": 1,
        "description": d.description,
        "role": d.role,
        "variables": d.variables,
        "global_functions": [_ordered(fn, FUNCTION_KEYS, {}) for fn in d.global_functions],
        "nodes": {nid: _node_out(node) for nid, node in d.nodes.items()},
    }
    return ImportResult(_ordered(flow, FLOW_KEYS, {}), d.warnings.items)
