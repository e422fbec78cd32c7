"""Global nodes: which digressions a call may take now, read from its state alone.

A global node (``global:`` on a node) is offered as a tool on every agent node that does not
opt out; whether it is offered *now* depends on the call: it is not offered while a
digression into it is open (no recursion), once it was used ``max_uses`` times, or before
``cooldown`` transitions have passed since its last digression ended. A returning global
node offers ``go_back`` while its digression is the innermost open one.

Both engines and a resumed agent compose a node's tools from the state, so this is a pure
function of it; it changes only when the call moves (the cooldown counts transitions), which
is when the tools are shown again anyway.
"""

from __future__ import annotations

from ringflow.callflow.compiled import CompiledFlow
from ringflow.callflow.state import CallState


def refusal(flow: CompiledFlow, state: CallState, node_id: str, name: str) -> str | None:
    """Why the dynamic tool ``name`` is not offered on ``node_id`` now, or None when it is."""
    fn = flow.nodes[node_id].functions.get(name)
    if fn is None:
        return f"'{name}' is not a function of node '{node_id}'"
    if fn.kind == "go_back":
        top = state.return_stack[-1] if state.return_stack else None
        if top is None or top.node != node_id:
            return "there is no digression to go back from here"
        return None
    spec = flow.global_nodes.get(name)
    if spec is None:
        return None
    if any(f.node == name for f in state.return_stack):
        return f"the call is already in '{name}': answer, then go back"
    uses = state.global_uses.get(name, 0)
    if spec.max_uses is not None and uses >= spec.max_uses:
        return f"'{name}' was used {uses} time{'' if uses == 1 else 's'} this call, its maximum"
    since = state.global_since.get(name)
    if spec.cooldown is not None and since is not None and state.transitions - since < spec.cooldown:
        return f"'{name}' is cooling down: offered again after {spec.cooldown} moves since its last use"
    return None


def offered(flow: CompiledFlow, state: CallState, node_id: str) -> list[str]:
    """The dynamic tools of ``node_id`` the call may use now, in the node's order."""
    return [name for name in flow.nodes[node_id].dynamic if refusal(flow, state, node_id, name) is None]
