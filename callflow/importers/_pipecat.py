"""What the two Pipecat formats share: messages, actions, context strategies, functions.

The editor's JSON and the older FlowConfig JSON describe the same NodeConfig, so the
mapping of its parts is written once and both importers stay about layout only.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import jsonschema

from ringflow.callflow.importers._common import DocPath, Warnings, function_name, label, text, var_type

CONTEXT = {"append": "append", "reset": "reset", "reset_with_summary": "reset_with_summary"}
_ACTION_NOTES = {"function": "its handler code is not carried"}


def join_messages(messages: Any, path: DocPath, w: Warnings, owner: str) -> str | None:
    """All message contents, in order, as one text; the roles of messages do not matter.

    Ringflow has one instruction text per node, so system, user and assistant
    messages alike become paragraphs of it.
    """
    if messages is None:
        return None
    if isinstance(messages, str):
        return text(messages)
    if not isinstance(messages, list):
        w.add(path, f"{owner}: expected a list of messages, got {type(messages).__name__}; not carried")
        return None
    parts: list[str] = []
    for i, msg in enumerate(messages):
        content = msg.get("content") if isinstance(msg, dict) else msg
        if isinstance(content, list):  # OpenAI content parts
            content = "\n".join(
                p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
            )
        if text(content) is None:
            w.add((*path, i), f"{owner}: message without text content; not carried")
            continue
        parts.append(text(content) or "")
    return "\n\n".join(parts) or None


def convert_actions(actions: Any, path: DocPath, w: Warnings, owner: str) -> list[dict[str, Any]]:
    """tts_say and end_conversation map one to one; code-backed actions cannot."""
    if actions is None:
        return []
    if not isinstance(actions, list):
        w.add(path, f"{owner}: expected a list of actions, got {type(actions).__name__}; not carried")
        return []
    out: list[dict[str, Any]] = []
    for i, action in enumerate(actions):
        kind = action.get("type") if isinstance(action, dict) else None
        say = text(action.get("text")) if isinstance(action, dict) else None
        if kind == "tts_say" and say:
            out.append({"tts_say": say})
        elif kind == "end_conversation":
            out.append({"end_conversation": say or ""})
        elif kind == "tts_say":
            w.add((*path, i), f"{owner}: tts_say action without text; not carried")
        else:
            handler = action.get("handler") if isinstance(action, dict) else None
            detail = f" (handler {label(handler)})" if handler else ""
            note = (
                _ACTION_NOTES.get(kind, "no Ringflow equivalent")
                if isinstance(kind, str)
                else "not an action"
            )
            w.add((*path, i), f"{owner}: action of type {label(kind)}{detail} not carried: {note}")
    return out


def context_strategy(value: Any, path: DocPath, w: Warnings, owner: str) -> str | None:
    """``{strategy: RESET_WITH_SUMMARY}`` (or the bare string) -> ``reset_with_summary``."""
    if value is None:
        return None
    raw = value.get("strategy") if isinstance(value, dict) else value
    strategy = CONTEXT.get(raw.strip().lower()) if isinstance(raw, str) else None
    if strategy is None:
        w.add(path, f"{owner}: context strategy {label(raw)} is unknown; not carried")
    if isinstance(value, dict) and text(value.get("summary_prompt")):
        w.add(path, f"{owner}: summary_prompt not carried; Ringflow summarises with its own prompt")
    return strategy


def _property(name: str, schema: Any, path: DocPath, w: Warnings, owner: str) -> dict[str, Any]:
    """One argument's JSON Schema, repaired to a valid one when the source's is not."""
    prop = copy.deepcopy(schema) if isinstance(schema, dict) else {}
    if isinstance(prop.get("type"), str) and var_type(prop["type"]):
        prop["type"] = var_type(prop["type"])
    try:
        jsonschema.Draft202012Validator.check_schema(prop)
        if isinstance(schema, dict):
            return prop
    except jsonschema.SchemaError:
        pass
    w.add(path, f"{owner}: argument '{name}' has no valid JSON Schema; imported as a string")
    return {"type": "string"}


def parameters(properties: Any, required: Any, path: DocPath, w: Warnings, owner: str) -> dict[str, Any]:
    props = properties if isinstance(properties, dict) else {}
    if properties is not None and not isinstance(properties, dict):
        w.add(path, f"{owner}: 'properties' is not a mapping; arguments not carried")
    out = {str(k): _property(str(k), v, path, w, owner) for k, v in props.items()}
    names = [r for r in required if isinstance(r, str) and r in out] if isinstance(required, list) else []
    params: dict[str, Any] = {"type": "object", "properties": out}
    if names:
        params["required"] = list(dict.fromkeys(names))
    return params


UNKNOWN_TARGETS = (
    "Pipecat Flows fails when the LLM calls a function whose node does not exist "
    "(its transition would end the call in an error)"
)


def build_function(
    raw: dict[str, Any],
    target: Any,
    path: DocPath,
    w: Warnings,
    owner: str,
    resolve: Callable[[Any], str | None],
) -> dict[str, Any] | None:
    """A Pipecat function as a capture or a transition-only entry.

    Without code, arguments can only be recorded (capture, stored in state) and a
    call can only move (transition_only); a function with neither still becomes a
    capture with no arguments so the LLM keeps the tool and the call is recorded.
    """
    name = function_name(raw.get("name"))
    if not name:
        w.add(path, f"{owner}: function without a usable name ({label(raw.get('name'))}); not carried")
        return None
    if name != raw.get("name"):
        w.add(path, f"{owner}: function '{label(raw.get('name'))}' renamed '{name}'")
    description = text(raw.get("description")) or f"Call {name.replace('_', ' ')}."
    entry: dict[str, Any] = {"name": name}
    dest = None
    if target is not None:
        dest = resolve(target)
        if dest is None:
            w.add_broken(
                path,
                f"{owner}: function '{name}' goes to unknown node {label(target)}; transition not carried",
            )
    props = raw.get("properties")
    if props or dest is None:
        entry.update(
            capture=True,
            description=description,
            parameters=parameters(props, raw.get("required"), path, w, f"{owner} '{name}'"),
        )
    else:
        entry.update(transition_only=True, description=description)
    if dest is not None:
        entry["transition_to"] = dest
    return entry


def node_role(data: dict[str, Any], path: DocPath, w: Warnings, owner: str) -> tuple[str | None, DocPath]:
    """A node's role and where it came from: ``role_message`` (a string, Pipecat Flows
    0.0.24 and 1.x) or the deprecated ``role_messages`` list.

    As in Pipecat Flows, ``role_message`` wins when a node has both.
    """
    single, legacy = data.get("role_message"), data.get("role_messages")
    if single is not None:
        role = text(single)
        if role is None:
            w.add((*path, "role_message"), f"{owner}: role_message is not text; not carried")
        elif legacy is not None:
            w.add(
                (*path, "role_messages"),
                f"{owner}: both role_message and role_messages; role_message is used, as Pipecat Flows does",
            )
        if role is not None:
            return role, (*path, "role_message")
    return join_messages(legacy, (*path, "role_messages"), w, owner), (*path, "role_messages")


def _targets(fn: dict[str, Any]) -> list[str]:
    t = fn.get("transition_to")
    return [t] if isinstance(t, str) else []


def inherited_roles(
    nodes: dict[str, dict[str, Any]],
    roles: dict[str, str],
    start: str,
    global_functions: list[dict[str, Any]],
) -> dict[str, set[str | None]]:
    """For each node, the roles the call can have when it gets there.

    Pipecat keeps a node's role until a later node sets one, so a node without its own
    role speaks with whichever role was set last on the way to it: found by walking
    from each node that sets one (and from the start) through nodes that do not.
    """
    shared = [t for fn in global_functions for t in _targets(fn)]
    nexts = {
        nid: {t for fn in node.get("functions", []) for t in _targets(fn)} | set(shared)
        for nid, node in nodes.items()
    }
    reach: dict[str, set[str | None]] = {nid: set() for nid in nodes}
    for origin in {start, *roles}:
        role = roles.get(origin)
        todo, seen = [origin], {origin}
        while todo:
            for nxt in nexts.get(todo.pop(), ()):
                if nxt in nodes and nxt not in seen and nxt not in roles:
                    seen.add(nxt)
                    reach[nxt].add(role)
                    todo.append(nxt)
    return reach


def fold_roles(
    nodes: dict[str, dict[str, Any]],
    roles: dict[str, str],
    start: str,
    w: Warnings,
    where: Callable[[str], DocPath],
    global_functions: list[dict[str, Any]] | None = None,
) -> str | None:
    """The start node's role becomes the flow's role.

    Pipecat keeps a role in force once set, which is what a flow-level role does. A
    node whose role differs (its own, or the one a node before it set) gets it in
    front of its task and ``add_role: false``, so its persona is exactly the source's.
    """
    if not roles:
        return None
    role = roles.get(start) or next(iter(roles.values()))
    reach = inherited_roles(nodes, roles, start, global_functions or [])
    for nid, node in nodes.items():
        own = roles.get(nid)
        if own is None:
            possible = {r for r in reach[nid] if r is not None} | ({role} if None in reach[nid] else set())
            if len(possible) > 1:
                w.add(
                    where(nid),
                    f"node '{nid}': reached after nodes with different roles; it keeps "
                    "the flow's role, check its persona",
                )
            if len(possible) != 1 or possible == {role}:
                continue
            own = next(iter(possible))
            why = "the role a node before it set differs"
        elif own == role:
            continue
        else:
            why = "its role differs"
        node["task"] = f"{own}\n\n{node['task']}"
        node["add_role"] = False
        w.add(
            where(nid), f"node '{nid}': {why} from the flow's role; put before its task, with add_role: false"
        )
    return role
