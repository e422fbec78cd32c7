"""Shape errors that do not hide the rest: what can still be checked is checked.

A flow with a misspelt key fails the shape check (pydantic), and the whole-flow rules
(templates, gates, dead ends: ``callflow/validate.py``) need a shaped flow. So the bad
parts are set aside, as little as possible, and the rules run on what is left:

- an unknown key, or a value of the wrong type or form, is dropped (a default takes its
  place); a part that then lacks a required key is dropped whole;
- a node that cannot be read at all stays, as a bare ``end`` node, so that transitions
  into it are not reported as going nowhere (a variable or an MCP server likewise, so
  that templates and entries naming it are not reported); an item of a list is
  dropped, and nothing is reported under that list (its items' positions no longer
  match the file);
- a flow that lacks ``flow`` is checked under a stand-in name; a flow whose ``nodes``
  cannot be read is not checked further.

A rule's verdict on what was set aside, or inside the list item that lost a part (an
entry that lost ``http`` would read as a handler entry), or inside a node that lost its
``type``, would be a guess and is left out. A node that lost something that may hold a
transition, or stands in as an ``end`` node, counts as able to reach an end node (its
own dead-end verdict would be a guess, and so would be those of the nodes that lead to
it), and then no node is called unreachable (it may lead there); without a readable
``start`` or ``global_functions`` the graph is not judged at all. Names a template may
use come from the file as written, so an extracted value whose spec was set aside is
still known.
"""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ringflow.callflow.errors import Issue, join_path
from ringflow.callflow.model import Flow, Node
from ringflow.callflow.shape_errors import Located, located_errors

MAX_ROUNDS = 12  # each round sets aside what the previous one's shape check refused
STAND_IN_NAME = "flow"
# a node's keys whose loss may remove a way out of it
_GRAPH_KEYS = frozenset(
    {
        "type",
        "functions",
        "transition_to",
        "branches",
        "default",
        "run",
        "dtmf",
        "pre_actions",
        "post_actions",
        "global",
    }
)
_NODE_KEYS = [f.alias or name for name, f in Node.model_fields.items()]

Parts = tuple[str | int, ...]


@dataclass
class Shaped:
    """The shape check's verdict: its errors, and the flow left once the bad parts were
    set aside (None when nothing could be checked beyond the shape)."""

    errors: list[Issue] = field(default_factory=list)
    flow: Flow | None = None
    set_aside: list[str] = field(default_factory=list)  # paths: nothing reported at or under them
    unsure_nodes: set[str] = field(default_factory=set)  # may reach an end node, for all we know
    judge_graph: bool = True
    names: set[str] = field(default_factory=set)  # variables and extracted values, as written

    def keeps(self, issue: Issue) -> bool:
        """Whether a whole-flow rule's issue stands on parts that were read as written."""
        return not any(_under(issue.path, aside) for aside in self.set_aside)


def check_shape(data: dict[str, Any]) -> Shaped:
    """Shape errors of ``data``, and its flow: as written when it has none, else (when one
    can be made) of what is left. May raise RecursionError (absurd nesting)."""
    out = Shaped()
    try:
        out.flow = Flow.model_validate(data)
        return out  # the common case: nothing to set aside, nothing copied
    except ValidationError as exc:
        found = located_errors(data, exc)
    out.names = _written_names(data)
    work = copy.deepcopy(data)
    for _ in range(MAX_ROUNDS):
        for x in found:
            if not any(_under(x.path, aside) for aside in out.set_aside):
                out.errors.append(Issue(x.path, x.message))
        targets = _targets(found)
        if not targets or not all(_set_aside(work, t, out) for t in targets):
            return out
        try:
            out.flow = Flow.model_validate(work)
            return out
        except ValidationError as exc:
            found = located_errors(work, exc)
    return out


def _under(path: str, aside: str) -> bool:
    return path == aside or path.startswith((f"{aside}.", f"{aside}["))


def _targets(found: list[Located]) -> list[tuple[Parts, str]]:
    """What to set aside for each error: the key itself, or for a missing key the part
    that lacks it; a part inside another one dropped."""
    picked: list[tuple[Parts, str]] = []
    for x in found:
        # a missing key: the part that lacks it (a top-level key: the key, stood in for)
        parts = x.parts[:-1] if x.kind == "missing" and len(x.parts) > 1 else x.parts
        picked.append((parts, x.kind if x.kind == "extra_forbidden" and parts == x.parts else "value"))
    picked.sort(key=lambda t: len(t[0]))
    out: list[tuple[Parts, str]] = []
    for parts, kind in picked:
        if not any(parts[: len(p)] == p for p, _ in out):
            out.append((parts, kind))
    # a later item of a list first: dropping an item moves the ones after it up
    out.sort(key=lambda t: [(1, p) if isinstance(p, int) else (0, p) for p in t[0]], reverse=True)
    return out


def _set_aside(work: dict[str, Any], target: tuple[Parts, str], out: Shaped) -> bool:
    """Drop (or stand in for) the part at ``parts``; False when nothing sensible can."""
    parts, kind = target
    if not parts or parts == ("nodes",):
        return False  # the flow as a whole, or its nodes: nothing left to check
    if parts == ("flow",):
        work["flow"] = STAND_IN_NAME
        out.set_aside.append("flow")
        return True
    parent: Any = work
    for p in parts[:-1]:
        try:
            parent = parent[p]
        except (KeyError, IndexError, TypeError):
            return False
    last = parts[-1]
    if isinstance(parent, list) and isinstance(last, int) and last < len(parent):
        del parent[last]
    elif isinstance(parent, dict) and last in parent:
        if parts[:-1] == ("nodes",):
            parent[last] = {"type": "end", "task": "-"}  # still a node transitions may name
        elif parts[:-1] == ("variables",):
            parent[last] = {}  # still a name templates may use
        elif parts[:-1] == ("mcp_servers",):
            parent[last] = {"url": "https://stand-in.invalid"}  # still a server entries may name
        else:
            del parent[last]
    else:
        return False
    if parts[0] in ("start", "global_functions"):
        out.judge_graph = False
    if parts[0] == "nodes" and len(parts) == 2:
        out.unsure_nodes.add(str(parts[1]))  # what it leads to is unknown
    if parts[0] == "nodes" and len(parts) >= 3:
        out.set_aside.append(join_path(_node_scope(parts, kind, out)))
    else:
        out.set_aside.append(join_path(_item_scope(parts)))
    return True


def _item_scope(parts: Parts) -> Parts:
    """Where a rule's verdicts may be changed by losing ``parts``: the list item holding
    it (an entry that lost a key may read as another kind of entry), or the whole list
    when the lost part is one of its items (the later items moved up)."""
    for i, p in enumerate(parts):
        if isinstance(p, int):
            return parts[:i] if i == len(parts) - 1 else parts[: i + 1]
    return parts


def _node_scope(parts: Parts, kind: str, out: Shaped) -> Parts:
    """``_item_scope`` inside a node; a node that lost its type (or a key nobody can place)
    may read as another kind of node, so then the whole node. A node that lost what may
    hold a way out of it may reach an end node, for all we know."""
    nid, key = str(parts[1]), str(parts[2])
    if kind == "extra_forbidden" and len(parts) == 3:
        close = difflib.get_close_matches(key, _NODE_KEYS, n=1, cutoff=0.6)
        key = close[0] if close else "type"
    if key in _GRAPH_KEYS:
        out.unsure_nodes.add(nid)
    return parts[:2] if key == "type" else _item_scope(parts)


def _written_names(data: dict[str, Any]) -> set[str]:
    """Variable and extracted names as the file has them, whatever else is wrong."""
    names: set[str] = set()
    variables = data.get("variables")
    if isinstance(variables, dict):
        names |= {k for k in variables if isinstance(k, str)}
    nodes = data.get("nodes")
    for node in nodes.values() if isinstance(nodes, dict) else ():
        extract = node.get("extract") if isinstance(node, dict) else None
        for spec in extract if isinstance(extract, list) else ():
            if isinstance(spec, dict) and isinstance(spec.get("name"), str):
                names.add(spec["name"])
    return names
