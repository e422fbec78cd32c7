"""Human views of a flow: a table for ``flow show`` and Mermaid for ``flow graph``."""

from __future__ import annotations

from ringflow.callflow.graph import edges, node_functions, targets
from ringflow.callflow.model import Flow

_SHAPES = {
    "agent": ('["', '"]'),
    "end": ('(["', '"])'),
    "gate": ('{"', '"}'),
    "action": ('[["', '"]]'),
    "subflow": ('[/"', '"/]'),
}


def _where(fn_target: list[tuple[str, str]]) -> str:
    if not fn_target:
        return "(stays)"
    return ", ".join(f"{label}: {dst}" if label else dst for label, dst in fn_target)


def table(flow: Flow) -> list[dict[str, str]]:
    """One row per node and function: ``node``, ``type``, ``function``, ``goes_to`` (``flow
    show``, and its ``--json``)."""
    rows: list[dict[str, str]] = []

    def row(nid: str, kind: str, function: str, goes_to: str) -> None:
        rows.append({"node": nid, "type": kind, "function": function, "goes_to": goes_to})

    for nid, node in flow.nodes.items():
        if node.type == "gate":
            for i, br in enumerate(node.branches or []):
                row(nid, node.type, f"branch {i + 1}", br.to)
            row(nid, node.type, "default", node.default or "")
            continue
        if node.type == "subflow":
            row(nid, node.type, f"use {node.use}", _where(targets(node.transition_to)))
            continue
        if node.type == "action" and node.run is not None:
            row(nid, node.type, f"run {node.run.name}", _where(targets(node.transition_to)))
            continue
        g = node.global_
        if g is not None:  # a digression: offered everywhere, back to where the call was (or on)
            back = "where it came from" if g.return_ is True else (g.return_ or "(stays)")
            row(nid, node.type, "go_back (global node)" if g.returns else "(global node)", str(back))
        functions = list(node_functions(flow, node))
        for fn, is_global in functions:
            name = f"{fn.name} ({fn.kind}{', global' if is_global else ''})"
            if fn.mcp is not None and fn.mcp.tools is not None:  # a group of server tools: name them
                tools = "all" if fn.mcp.tools == "all" else ", ".join(fn.mcp.tools)
                name = f"{fn.mcp.server}: {tools} (mcp{', global' if is_global else ''})"
            row(nid, node.type, name, _where(targets(fn.transition_to)))
        if not functions and g is None and node.type == "end" and "." in nid:  # a subflow's end
            row(nid, node.type, "-", f"returns to {nid.rpartition('.')[0]} (end={nid.rpartition('.')[2]})")
        elif not functions and g is None:
            row(nid, node.type, "-", f"ends call ({node.disposition})" if node.disposition else "-")
    return rows


def show(flow: Flow) -> str:
    lines = [
        f"flow {flow.flow} v{flow.version}" + (f": {flow.description}" if flow.description else ""),
        f"start: {flow.start_node}",
        "",
    ]
    rows: list[tuple[str, str, str, str]] = [("NODE", "TYPE", "FUNCTION", "GOES TO")]
    previous = None
    for entry in table(flow):
        first = entry["node"] != previous
        previous = entry["node"]
        node, kind = (entry["node"], entry["type"]) if first else ("", "")
        rows.append((node, kind, entry["function"], entry["goes_to"]))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(lines)


# Words Mermaid reads as syntax when used as a node id (a node called ``end`` closes a
# subgraph). Flow node ids are lower case, so a capitalised id cannot clash with another.
_MERMAID_RESERVED = frozenset(
    {
        "end",
        "graph",
        "flowchart",
        "subgraph",
        "style",
        "class",
        "classdef",
        "click",
        "linkstyle",
        "direction",
        "default",
        "call",
        "href",
    }
)


def _mid(nid: str) -> str:
    """A Mermaid id: a reserved word capitalised; a subflow's inlined node (``verify.ask``)
    with ``__`` for the dot, which Mermaid would not read as part of an id."""
    nid = nid.replace(".", "__")
    return nid.capitalize() if nid in _MERMAID_RESERVED else nid


def _label(text: str) -> str:
    return " ".join(text.replace('"', "'").split())


def mermaid(flow: Flow) -> str:
    lines = ["flowchart TD"]
    for nid, node in flow.nodes.items():
        left, right = _SHAPES[node.type]
        title = nid if node.type == "agent" else f"{nid} ({node.type})"
        lines.append(f"    {_mid(nid)}{left}{_label(title)}{right}")
    for e in edges(flow):
        style = "-.->" if e.via_global else "-->"
        lines.append(f'    {_mid(e.src)} {style}|"{_label(e.label)}"| {_mid(e.dst)}')
    lines.append("    classDef endNode fill:#eee,stroke:#555")
    ends = [nid for nid, n in flow.nodes.items() if n.type == "end"]
    if ends:
        lines.append(f"    class {','.join(_mid(n) for n in ends)} endNode")
    return "\n".join(lines) + "\n"
