"""JSON schemas for tools: derived from handler signatures, made strict for the LLM.

OpenAI's strict function calling accepts a subset of JSON Schema: every object must
list all of its properties as required and forbid others. The flow author writes
ordinary schemas; :func:`to_strict` turns them into what the LLM sees (optional
properties become nullable) and :func:`drop_nulls` undoes that on the way back, so
arguments are always validated against the author's own schema.
"""

from __future__ import annotations

import copy
import inspect
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, Union, get_args, get_origin

import docstring_parser

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_UNSUPPORTED_STRICT = ("default", "examples", "$schema", "title")


class SignatureError(ValueError):
    """A handler whose signature cannot become a tool; the message says what to change."""


def annotation_schema(tp: Any) -> dict[str, Any]:
    if tp is inspect.Parameter.empty or tp is Any:
        return {"type": "string"}
    if tp in _SCALARS:
        return {"type": _SCALARS[tp]}
    origin = get_origin(tp)
    args = get_args(tp)
    if origin is Literal:
        kinds = {type(a) for a in args}
        schema: dict[str, Any] = {"enum": list(args)}
        if len(kinds) == 1 and next(iter(kinds)) in _SCALARS:
            schema["type"] = _SCALARS[next(iter(kinds))]
        return schema
    if origin in (Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        if len(members) == 1 and len(args) == 2:
            inner = annotation_schema(members[0])
            return _nullable(inner)
        return {"anyOf": [annotation_schema(a) for a in args]}
    if tp is list or origin is list:
        return {"type": "array", "items": annotation_schema(args[0]) if args else {}}
    if tp is dict or origin is dict:
        return {"type": "object"}
    raise SignatureError(
        f"unsupported parameter type {tp!r}: use str, int, float, bool, list, dict, Optional or Literal"
    )


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    t = schema.get("type")
    if isinstance(t, str):
        return (
            {**schema, "type": [t, "null"]}
            if "enum" not in schema
            else {**schema, "type": [t, "null"], "enum": [*schema["enum"], None]}
        )
    if isinstance(t, list):
        return schema if "null" in t else {**schema, "type": [*t, "null"]}
    return {"anyOf": [schema, {"type": "null"}]}


def handler_schema(fn: Callable[..., Any]) -> tuple[str, dict[str, Any]]:
    """(description, parameters) of a handler; raises :class:`SignatureError`.

    Everything the LLM sees comes from the code, so code and tool cannot drift apart.
    """
    if not inspect.iscoroutinefunction(fn):
        raise SignatureError("must be an async function ('async def')")
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    if not params or params[0].name != "flow_manager":
        raise SignatureError("its first parameter must be named 'flow_manager'")
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:  # an annotation that cannot be resolved in its module
        raise SignatureError(f"cannot resolve type hints: {exc}") from None
    doc = docstring_parser.parse(inspect.getdoc(fn) or "", docstring_parser.DocstringStyle.GOOGLE)
    documented = {p.arg_name: (p.description or "").strip() for p in doc.params}
    description = " ".join(x for x in (doc.short_description, doc.long_description) if x).strip()
    if not description:
        raise SignatureError("its docstring needs a summary line: it becomes the tool description")
    properties: dict[str, Any] = {}
    required: list[str] = []
    for p in params[1:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise SignatureError(f"'*{p.name}' parameters cannot be offered to the LLM")
        if p.name not in documented:
            raise SignatureError(
                f"its docstring does not document parameter '{p.name}' (add it under 'Args:')"
            )
        prop = annotation_schema(hints.get(p.name, p.annotation))
        if documented[p.name]:
            prop = {**prop, "description": documented[p.name]}
        properties[p.name] = prop
        if p.default is inspect.Parameter.empty:
            required.append(p.name)
    return description, {"type": "object", "properties": properties, "required": required}


def to_strict(schema: dict[str, Any]) -> dict[str, Any] | None:
    """The strict-mode form of a parameters schema, or None if it has none.

    A free-form object (no ``properties``) cannot be strict; such a tool is offered
    non-strict rather than rejected, so flows with open-ended arguments still work.
    """
    try:
        strict: dict[str, Any] = _strict(copy.deepcopy(schema))  # a dict in, a dict out
        return strict
    except _NotStrict:
        return None


class _NotStrict(Exception):
    pass


def _strict(s: Any) -> Any:
    if isinstance(s, bool):
        raise _NotStrict  # ``true``/``false`` schemas have no strict form
    if not isinstance(s, dict):
        return s
    for key in _UNSUPPORTED_STRICT:
        s.pop(key, None)
    t = s.get("type")
    is_object = t == "object" or (isinstance(t, list) and "object" in t)
    if is_object:
        props = s.get("properties")
        if props is None or s.get("additionalProperties") not in (None, False):
            raise _NotStrict
        required = set(s.get("required", []))
        new_props = {}
        for name, sub in props.items():
            sub = _strict(sub)
            new_props[name] = sub if name in required else _nullable(sub)
        s["properties"] = new_props
        s["required"] = list(props)
        s["additionalProperties"] = False
    if "items" in s:
        if s["items"] == {}:
            raise _NotStrict
        s["items"] = _strict(s["items"])
    for key in ("anyOf", "allOf", "oneOf"):
        if key in s:
            s[key] = [_strict(x) for x in s[key]]
    return s


def drop_nulls(args: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """Remove ``null`` values a strict LLM sends for optional properties it had no value for."""
    required = set(schema.get("required", []))
    return {k: v for k, v in args.items() if v is not None or k in required}
