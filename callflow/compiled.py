"""A flow prepared for the hot path: templates parsed, schemas made strict, validators built.

Built once per flow definition (and cached), so composing a node's prompt and tools
never re-parses or re-validates the flow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import jsonschema

from callflow.model import FlowDefinition, FunctionEntry, Node
from callflow.schema import drop_nulls, to_strict
from callflow.templating import Template, compile_template

_EMPTY_PARAMS: dict[str, Any] = {"type": "object", "properties": {}, "required": []}


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


@dataclass(frozen=True)
class CompiledFlow:
    definition: FlowDefinition
    role: Template | None
    nodes: dict[str, CompiledNode]
    run_functions: dict[str, CompiledFunction]  # action nodes' ``run``, by node id


def _compile_function(fn: FunctionEntry, definition: FlowDefinition) -> CompiledFunction:
    spec = definition.handlers.get(fn.name) if fn.kind == "handler" else None
    if spec is not None:
        description, params = spec.description, spec.parameters
    else:
        description, params = fn.description or "", fn.parameters or _EMPTY_PARAMS
    strict = to_strict(params)
    timeout = fn.timeout_s or (spec.timeout_s if spec else None) or 10.0
    cancel = fn.cancel_on_interruption
    if cancel is None:
        cancel = bool(spec.cancel_on_interruption) if spec else False
    return CompiledFunction(
        entry=fn,
        kind=fn.kind,
        description=compile_template(description),
        parameters=params,
        llm_parameters=strict if strict is not None else params,
        strict=strict is not None,
        validator=jsonschema.Draft202012Validator(params),
        timeout_s=timeout,
        cancel_on_interruption=cancel,
    )


def compile_flow(definition: FlowDefinition) -> CompiledFlow:
    flow = definition.flow
    globals_ = [_compile_function(f, definition) for f in flow.global_functions]
    nodes: dict[str, CompiledNode] = {}
    runs: dict[str, CompiledFunction] = {}
    for nid, node in flow.nodes.items():
        fns = {f.name: _compile_function(f, definition) for f in node.functions}
        if node.type == "agent":
            for g in globals_:
                fns.setdefault(g.entry.name, g)
        nodes[nid] = CompiledNode(
            id=nid,
            node=node,
            task=compile_template(node.task) if node.task else None,
            greeting=compile_template(node.greeting) if node.greeting else None,
            functions=fns,
        )
        if node.run is not None:
            runs[nid] = _compile_function(node.run, definition)
    return CompiledFlow(
        definition=definition,
        role=compile_template(flow.role) if flow.role else None,
        nodes=nodes,
        run_functions=runs,
    )


@lru_cache(maxsize=256)
def _cached(definition_json: str) -> CompiledFlow:
    return compile_flow(FlowDefinition.model_validate_json(definition_json))


def compiled_for(definition: FlowDefinition) -> CompiledFlow:
    """Compile once per distinct definition, shared by every call of that flow."""
    return _cached(definition.model_dump_json())
