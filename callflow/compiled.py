"""A flow prepared for the hot path: templates parsed, schemas made strict, validators built.

Built once per flow definition (and cached), so composing a node's prompt and tools
never re-parses or re-validates the flow.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from ringflow.callflow.effects import ToolSpec
from ringflow.callflow.knowledge import RETRIEVAL_FUNCTION, SEARCH_DESCRIPTION, SEARCH_PARAMETERS
from ringflow.callflow.mcp_tools import expand
from ringflow.callflow.model import (
    RETURN_TOOL,
    SEND_DTMF_PARAMETERS,
    FlowDefinition,
    FunctionEntry,
    GlobalNode,
    Node,
)
from ringflow.callflow.reads import extracted_names, node_reads
from ringflow.callflow.schema import drop_nulls, to_strict
from ringflow.callflow.subflow_handlers import handler_key, handler_scope
from ringflow.callflow.templating import Template, _render_value, compile_template, lookup

_EMPTY_PARAMS: dict[str, Any] = {"type": "object", "properties": {}, "required": []}

Render = Callable[[Mapping[str, Any]], str]


def renderer(template: Template) -> Render:
    """``template.render`` as a closure made once: constant text when there is no
    placeholder, else a plain loop over prepared parts, with no per-call checks.

    Values are looked up and formatted by the templating module's own functions, so the
    text is exactly what ``Template.render`` gives.
    """
    if template.is_static:
        return _constant(template.render({}))
    parts: tuple[Any, ...] = tuple(p if isinstance(p, str) else (p.path, p.fallback) for p in template.parts)

    def render(values: Mapping[str, Any]) -> str:
        return "".join([p if type(p) is str else _render_value(lookup(values, p[0]), p[1]) for p in parts])

    return render


def _constant(text: str) -> Render:
    return lambda _values: text


def _no_text(_values: Mapping[str, Any]) -> str:
    return ""


def _prompt(parts: list[Render]) -> Render:
    """Role then task, each stripped, blank ones left out."""

    def render(values: Mapping[str, Any]) -> str:
        return "\n\n".join(p for p in (r(values).strip() for r in parts) if p)

    return render


@dataclass(frozen=True)
class CompiledFunction:
    entry: FunctionEntry
    kind: str
    description: Template
    parameters: dict[str, Any]  # the author's schema, for validation
    llm_parameters: dict[str, Any]  # what the LLM sees
    strict: bool
    validator: Any
    timeout_s: float
    cancel_on_interruption: bool
    render_description: Render = _no_text
    tool: ToolSpec | None = None  # built once when the description has no placeholder
    scope: str = ""  # whose handlers module runs it: a used flow's subflow node, "" the flow's

    def check_args(self, args: Any) -> tuple[dict[str, Any] | None, str | None]:
        """(cleaned args, None) or (None, an error message fit for the LLM)."""
        if not isinstance(args, dict):
            return None, "arguments must be a JSON object"
        cleaned = drop_nulls(args, self.parameters) if args else args
        if not cleaned and not self.parameters.get("required"):
            return cleaned, None
        errors = sorted(self.validator.iter_errors(cleaned), key=lambda e: list(e.path))
        if not errors:
            return cleaned, None
        e = errors[0]
        where = ".".join(str(p) for p in e.path)
        return None, f"invalid argument{' ' + where if where else ''}: {e.message}"


@dataclass(frozen=True)
class CompiledNode:
    id: str
    node: Node
    task: Template | None
    greeting: Template | None
    functions: dict[str, CompiledFunction] = field(default_factory=dict)
    # Prepared once, so entering a node renders only what is templated: the prompt (role
    # and task), the greeting, the tool list when no description is templated, and
    # whether the node needs the call's values at all.
    render_prompt: Render = _no_text
    render_greeting: Render | None = None
    tools: tuple[ToolSpec, ...] | None = None
    static: bool = False
    # the global nodes (and a returning global node's ``go_back``) among ``functions``: offered
    # only while the call's state allows (``digressions.offered``), so never in ``tools``
    dynamic: tuple[str, ...] = ()
    # functions the agent calls itself, never offered to the LLM: the node's automatic
    # retrieval (``RETRIEVAL_FUNCTION``, ``knowledge:`` on the node)
    hidden: tuple[str, ...] = ()


@dataclass(frozen=True)
class CompiledFlow:
    definition: FlowDefinition
    role: Template | None
    nodes: dict[str, CompiledNode]
    run_functions: dict[str, CompiledFunction]  # action nodes' ``run``, by node id
    # what entering each node reads, and what each node's extraction gives (callflow/reads.py)
    reads: dict[str, frozenset[str]] = field(default_factory=dict)
    extracts: dict[str, frozenset[str]] = field(default_factory=dict)
    global_nodes: dict[str, GlobalNode] = field(default_factory=dict)  # ``global:`` nodes, by id


def closed(params: dict[str, Any]) -> dict[str, Any]:
    """The schema the arguments are checked against: an object with declared ``properties``
    takes no others unless its author said so (``additionalProperties``).

    The LLM's strict schema already says this, but the workflow checks what arrives, and an
    undeclared argument could otherwise reach a handler, a capture or an HTTP request.
    """
    if isinstance(params.get("properties"), dict) and "additionalProperties" not in params:
        return {**params, "additionalProperties": False}
    return params


def _compile_function(fn: FunctionEntry, definition: FlowDefinition, node: str = "") -> CompiledFunction:
    """``node``: the node whose own function this is ("" for the flow's global functions):
    a used flow's node's handler is its flow's (``callflow/subflow_handlers.py``)."""
    scope = handler_scope(definition, node, fn.name) if node and fn.kind in ("handler", "jobs") else ""
    spec = definition.handlers.get(handler_key(scope, fn.name)) if fn.kind == "handler" else None
    if spec is not None:
        description, params = spec.description, spec.parameters
    else:
        default = SEND_DTMF_PARAMETERS if fn.kind == "send_dtmf" else _EMPTY_PARAMS
        if fn.kind == "knowledge":
            default = SEARCH_PARAMETERS
        description, params = fn.description or "", fn.parameters or default
        if fn.kind == "knowledge" and not description:
            description = SEARCH_DESCRIPTION
    strict = to_strict(params)
    timeout = fn.timeout_s or (spec.timeout_s if spec else None) or 10.0
    cancel = fn.cancel_on_interruption
    if cancel is None:
        cancel = bool(spec.cancel_on_interruption) if spec else False
    template = compile_template(description)
    llm_parameters = strict if strict is not None else params
    tool = None
    if template.is_static:
        tool = ToolSpec(
            name=fn.name,
            description=template.render({}),
            parameters=llm_parameters,
            strict=strict is not None,
        )
    return CompiledFunction(
        entry=fn,
        kind=fn.kind,
        description=template,
        parameters=params,
        llm_parameters=llm_parameters,
        strict=strict is not None,
        validator=jsonschema.Draft202012Validator(closed(params)),
        timeout_s=timeout,
        cancel_on_interruption=cancel,
        render_description=renderer(template),
        tool=tool,
        scope=scope,
    )


def _digression(name: str, description: str, kind: str) -> CompiledFunction:
    """The tool entering a global node (``global_node``) or ending the digression (``go_back``):
    no arguments, answered by the engine alone (the agent treats it as a local transition)."""
    entry = FunctionEntry(name=name, description=description, transition_only=True)
    template = compile_template("")  # the description is plain text, said to the LLM as written
    return CompiledFunction(
        entry=entry,
        kind=kind,
        description=template,
        parameters=_EMPTY_PARAMS,
        llm_parameters=to_strict(_EMPTY_PARAMS) or _EMPTY_PARAMS,
        strict=True,
        validator=jsonschema.Draft202012Validator(closed(_EMPTY_PARAMS)),
        timeout_s=10.0,
        cancel_on_interruption=False,
        render_description=renderer(template),
        tool=ToolSpec(
            name=name,
            description=description,
            parameters=to_strict(_EMPTY_PARAMS) or _EMPTY_PARAMS,
            strict=True,
        ),
    )


RETURN_DESCRIPTION = (
    "The caller's question here is answered: go back to the conversation from before it. "
    "Call it as soon as this detour is done."
)


def _offered_here(nid: str, node: Node, global_nodes: dict[str, GlobalNode]) -> list[CompiledFunction]:
    """The dynamic tools of a node: ``go_back`` on a returning global node, then the flow's
    global nodes (but itself) on an agent node that does not opt out."""
    out: list[CompiledFunction] = []
    own = global_nodes.get(nid)
    if own is not None and own.returns:
        out.append(_digression(RETURN_TOOL, RETURN_DESCRIPTION, "go_back"))
    if node.type == "agent" and node.global_nodes:
        out += [
            _digression(g, spec.description, "global_node") for g, spec in global_nodes.items() if g != nid
        ]
    return out


def _compile_node(
    nid: str,
    node: Node,
    role: Template | None,
    fns: dict[str, CompiledFunction],
    dynamic: tuple[str, ...] = (),
    hidden: tuple[str, ...] = (),
) -> CompiledNode:
    task = compile_template(node.task) if node.task else None
    greeting = compile_template(node.greeting) if node.greeting else None
    templates = [t for t in (role if node.add_role else None, task) if t is not None]
    prompt_static = all(t.is_static for t in templates)
    render_prompt = _prompt([renderer(t) for t in templates])
    if prompt_static:
        render_prompt = _constant(render_prompt({}))
    tools_static = all(fn.tool is not None for fn in fns.values())
    fixed = [fn for name, fn in fns.items() if name not in dynamic and name not in hidden]
    return CompiledNode(
        id=nid,
        node=node,
        task=task,
        greeting=greeting,
        functions=fns,
        render_prompt=render_prompt,
        render_greeting=renderer(greeting) if greeting is not None else None,
        tools=tuple(fn.tool for fn in fixed if fn.tool is not None) if tools_static else None,
        static=prompt_static and tools_static and (greeting is None or greeting.is_static),
        dynamic=dynamic,
        hidden=hidden,
    )


def _compile_functions(
    entries: list[FunctionEntry],
    definition: FlowDefinition,
    reserved: frozenset[str] = frozenset(),
    node: str = "",
) -> list[CompiledFunction]:
    """Each entry compiled; an ``mcp`` entry stands for the server tools pinned for the call
    (``callflow/mcp_tools.py``), which never displace a function the flow names itself:
    one of these entries, or one of ``reserved`` (a node's: the flow's global functions)."""
    plain = [_compile_function(f, definition, node) for f in entries if f.mcp is None]
    taken = {f.entry.name for f in plain} | reserved
    for f in entries:
        for entry in expand(f, definition) if f.mcp is not None else []:
            if entry.name not in taken:
                taken.add(entry.name)
                plain.append(_compile_function(entry, definition, node))
    return plain


def compile_flow(definition: FlowDefinition) -> CompiledFlow:
    flow = definition.flow
    globals_ = _compile_functions(flow.global_functions, definition)
    role = compile_template(flow.role) if flow.role else None
    nodes: dict[str, CompiledNode] = {}
    runs: dict[str, CompiledFunction] = {}
    own_globals = frozenset(f.name for f in flow.global_functions if f.mcp is None)
    global_nodes = {nid: n.global_ for nid, n in flow.nodes.items() if n.global_ is not None}
    for nid, node in flow.nodes.items():
        reserved = own_globals if node.type == "agent" else frozenset()
        fns = {f.entry.name: f for f in _compile_functions(node.functions, definition, reserved, nid)}
        if node.type == "agent":
            for g in globals_:
                fns.setdefault(g.entry.name, g)
        dynamic: list[str] = []
        for d in _offered_here(nid, node, global_nodes):
            if d.entry.name not in fns:  # (validation refuses a clash)
                fns[d.entry.name] = d
                dynamic.append(d.entry.name)
        hidden: tuple[str, ...] = ()
        if node.knowledge is not None and node.type == "agent" and RETRIEVAL_FUNCTION not in fns:
            entry = FunctionEntry(name=RETRIEVAL_FUNCTION, knowledge=node.knowledge)
            fns[RETRIEVAL_FUNCTION] = _compile_function(entry, definition)
            hidden = (RETRIEVAL_FUNCTION,)
        nodes[nid] = _compile_node(nid, node, role, fns, tuple(dynamic), hidden)
        if node.run is not None:
            runs[nid] = _compile_function(node.run, definition, nid)
    reads = {
        nid: node_reads(
            flow,
            node,
            frozenset(p.path[0] for f in nodes[nid].functions.values() for p in f.description.placeholders),
        )
        for nid, node in flow.nodes.items()
    }
    return CompiledFlow(
        definition=definition,
        role=role,
        nodes=nodes,
        run_functions=runs,
        reads=reads,
        extracts={nid: extracted_names(node) for nid, node in flow.nodes.items() if node.extract},
        global_nodes=global_nodes,
    )


_CACHE_SIZE = 256
_compiled: dict[str, CompiledFlow] = {}


def compiled_for(definition: FlowDefinition) -> CompiledFlow:
    """Compile once per distinct definition, shared by every call of that flow.

    Keyed by the definition's JSON, but the definition given is compiled as it is: it
    is not rebuilt from that JSON, which a validated model need not survive unchanged.
    """
    key = definition.model_dump_json()
    flow = _compiled.get(key)
    if flow is None:
        if len(_compiled) >= _CACHE_SIZE:
            _compiled.pop(next(iter(_compiled)))
        flow = _compiled[key] = compile_flow(definition)
    return flow
