"""What changed between two versions of a flow, for a reviewer (``ringflow flow diff``).

Grouped the way a change to a phone bot is reviewed: nodes added or removed, each kept
node's prompt (``task``, ``greeting``), functions and routing, the flow's own settings and
role. Values are compared as they are published (JSON), so a default written out and the
same default left implicit are no change.
"""

from __future__ import annotations

from typing import Any

from ringflow.callflow.model import Flow

PROMPT_KEYS = ("task", "greeting")
_FLOW_KEYS = ("role", "description", "variables", "handlers", "global_functions", "mcp_servers", "start")


def _functions(node: dict[str, Any]) -> dict[str, Any]:
    return {f["name"]: f for f in node.get("functions") or []}


def _changed_keys(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


def flow_diff(old: Flow, new: Flow) -> dict[str, Any]:
    """``{"nodes": {"added", "removed", "changed": {node: {...}}}, "settings": [...],
    "flow": [...]}``; every list empty when the flows are the same."""
    a, b = old.model_dump(mode="json"), new.model_dump(mode="json")
    an, bn = a["nodes"], b["nodes"]
    changed: dict[str, Any] = {}
    for name in [n for n in an if n in bn]:
        x, y = an[name], bn[name]
        if x == y:
            continue
        fx, fy = _functions(x), _functions(y)
        entry = {
            "prompts": [k for k in PROMPT_KEYS if x.get(k) != y.get(k)],
            "functions": {
                "added": [f for f in fy if f not in fx],
                "removed": [f for f in fx if f not in fy],
                "changed": [f for f in fx if f in fy and fx[f] != fy[f]],
            },
            "other": [k for k in _changed_keys(x, y) if k not in PROMPT_KEYS and k != "functions"],
        }
        changed[name] = entry
    return {
        "nodes": {
            "added": [n for n in bn if n not in an],
            "removed": [n for n in an if n not in bn],
            "changed": changed,
        },
        "settings": _changed_keys(a["settings"], b["settings"]),
        "flow": [k for k in _FLOW_KEYS if a.get(k) != b.get(k)],
    }


def is_empty(diff: dict[str, Any]) -> bool:
    nodes = diff["nodes"]
    return not (nodes["added"] or nodes["removed"] or nodes["changed"] or diff["settings"] or diff["flow"])


def diff_lines(diff: dict[str, Any]) -> list[str]:
    """The diff as lines for a terminal."""
    out = [f"+ node {n}" for n in diff["nodes"]["added"]]
    out += [f"- node {n}" for n in diff["nodes"]["removed"]]
    for name, c in diff["nodes"]["changed"].items():
        out.append(f"~ node {name}")
        out += [f"    ~ prompt {k}" for k in c["prompts"]]
        out += [f"    + function {f}" for f in c["functions"]["added"]]
        out += [f"    - function {f}" for f in c["functions"]["removed"]]
        out += [f"    ~ function {f}" for f in c["functions"]["changed"]]
        out += [f"    ~ {k}" for k in c["other"]]
    out += [f"~ settings.{k}" for k in diff["settings"]]
    out += [f"~ {k}" for k in diff["flow"]]
    return out or ["no changes"]
