"""The flow as a graph: who can move the call where.

Validation (dead ends, reachability, cycles), ``flow show`` and ``flow graph`` all
read the same edge list, so they cannot disagree about what a flow allows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ringflow.callflow.model import RETURN_TOOL, BranchTable, Flow, FunctionEntry, Node, Transition


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    label: str
    via_global: bool = False


def targets(t: Transition | None) -> list[tuple[str, str]]:
    """(case label, node) pairs a transition can lead to."""
    if t is None:
        return []
    if isinstance(t, str):
        return [("", t)]
    out = [(f"{t.field}={k}", v) for k, v in t.cases.items()]
    if t.default is not None:
        out.append(("default", t.default))
    return out


def offers_globals(node: Node) -> bool:
    return node.type == "agent"


def node_functions(flow: Flow, node: Node) -> Iterator[tuple[FunctionEntry, bool]]:
    """The node's own functions, then the global ones: the order the LLM sees."""
    for fn in node.functions:
        yield fn, False
    if offers_globals(node):
        for fn in flow.global_functions:
            yield fn, True


def offers_global_nodes(node: Node) -> bool:
    """Whether the flow's global nodes are offered on this node (``global_nodes: false`` opts out)."""
    return node.type == "agent" and node.global_nodes


def global_edges(flow: Flow) -> list[Edge]:
    """Digressions: every node that offers a global node can go there; a returning one goes
    back to any of them (``return: true``) or on to the node its ``return`` names."""
    out: list[Edge] = []
    for gid, g in flow.nodes.items():
        if g.global_ is None:
            continue
        offering = [nid for nid, n in flow.nodes.items() if nid != gid and offers_global_nodes(n)]
        out += [Edge(nid, gid, f"global {gid}", True) for nid in offering]
        if g.global_.return_ is True:
            out += [Edge(gid, nid, RETURN_TOOL, True) for nid in offering]
        elif isinstance(g.global_.return_, str):
            out.append(Edge(gid, g.global_.return_, RETURN_TOOL))
    return out


def edges(flow: Flow) -> list[Edge]:
    out: list[Edge] = []
    for nid, node in flow.nodes.items():
        if node.type == "gate":
            for i, br in enumerate(node.branches or []):
                out.append(Edge(nid, br.to, f"branch {i + 1}"))
            if node.default is not None:
                out.append(Edge(nid, node.default, "default"))
        elif node.type == "subflow":
            out += _subflow_edges(flow, nid, node)
        elif node.type == "action":
            name = node.run.name if node.run else "run"
            for label, dst in targets(node.transition_to):
                out.append(Edge(nid, dst, f"{name} {label}".strip()))
        else:
            for fn, is_global in node_functions(flow, node):
                for label, dst in targets(fn.transition_to):
                    out.append(Edge(nid, dst, f"{fn.name} {label}".strip(), is_global))
                if fn.transfer is not None and fn.transfer.fallback is not None:
                    out.append(Edge(nid, fn.transfer.fallback, f"{fn.name} failed", is_global))
            if node.dtmf is not None:
                for label, dst in targets(node.dtmf.transition_to):
                    out.append(Edge(nid, dst, f"keys {label}".strip()))
    out += global_edges(flow)
    voicemail = flow.settings.voicemail
    if voicemail is not None and voicemail.node in flow.nodes:  # a machine answers: from the start
        out.append(Edge(flow.start_node, voicemail.node, "answering machine"))
    return out


def _subflow_edges(flow: Flow, nid: str, node: Node) -> list[Edge]:
    """Into the used flow's nodes when they are inlined (its start node comes first), and
    from each of its end nodes to where the call goes on; else (a flow being validated,
    before its subflows are read) from the node itself."""
    prefix = f"{nid}."
    entry = next((k for k in flow.nodes if k.startswith(prefix)), None)
    onward = targets(node.transition_to)
    if entry is None:
        return [Edge(nid, dst, f"subflow {label}".strip()) for label, dst in onward]
    exits = [k for k, n in flow.nodes.items() if n.type == "end" and k.rpartition(".")[0] == nid]
    out = [Edge(nid, entry, "subflow")]
    t = node.transition_to
    for x in exits:
        dst = t.cases.get(x.rpartition(".")[2], t.default) if isinstance(t, BranchTable) else t
        if dst is not None:
            out.append(Edge(x, dst, "return"))
    return out


def ends_by_action(node: Node) -> bool:
    """A node whose actions hang up is a way out, like an end node."""
    return any(a.end_conversation is not None for a in (*node.pre_actions, *node.post_actions))


def reachable(start: str, adj: dict[str, set[str]]) -> set[str]:
    seen = {start}
    stack = [start]
    while stack:
        for nxt in adj.get(stack.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def adjacency(flow: Flow, include_globals: bool = True) -> dict[str, set[str]]:
    adj: dict[str, set[str]] = {nid: set() for nid in flow.nodes}
    for e in edges(flow):
        if e.dst in flow.nodes and (include_globals or not e.via_global):
            adj[e.src].add(e.dst)
    return adj


def strongly_connected(adj: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative so a long chain cannot overflow the stack."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in adj:
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(adj[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(adj[w]))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp: list[str] = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(comp)
    return out


def is_branch(t: Transition | None) -> bool:
    return isinstance(t, BranchTable)
