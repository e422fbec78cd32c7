"""A call's input variables: defaults, required values and types, checked at start."""

from __future__ import annotations

from typing import Any

from ringflow.callflow.errors import Issue
from ringflow.callflow.model import Flow

_PY_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


def type_ok(kind: str, value: Any) -> bool:
    if value is None:
        return True
    if kind in ("integer", "number") and isinstance(value, bool):
        return False
    if kind == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _PY_TYPES.get(kind, (object,)))


def resolve_variables(flow: Flow, given: dict[str, Any]) -> tuple[dict[str, Any], list[Issue]]:
    """Defaults filled in, given values checked; undeclared names pass through.

    Undeclared inputs are kept (a campaign may carry extra context for templates with
    fallbacks) but never override a declared variable's type check.
    """
    values: dict[str, Any] = {}
    issues: list[Issue] = []
    for name, var in flow.variables.items():
        if name in given:
            value = given[name]
            if not type_ok(var.type, value):
                issues.append(Issue(f"variables.{name}", f"expected {var.type}, got {type(value).__name__}"))
            elif var.enum is not None and value not in var.enum:
                issues.append(Issue(f"variables.{name}", f"{value!r} is not one of {var.enum}"))
            values[name] = value
        elif var.default is not None:
            values[name] = var.default
        elif var.required:
            issues.append(
                Issue(f"variables.{name}", f"required variable '{name}' was not given when the call started")
            )
        else:
            values[name] = None
    for name, value in given.items():
        values.setdefault(name, value)
    return values, issues


def undeclared_variables(flow: Flow, given: dict[str, Any]) -> list[Issue]:
    """An issue per given name the flow does not declare under ``variables``.

    A call keeps its variables in its history, state, record and webhook, so a value
    nobody declared (an SSN pasted into ``--var``) must be refused, not stored. Only the
    name is repeated in the message, never the value.
    """
    declared = sorted(flow.variables)
    hint = f"; declared: {', '.join(declared)}" if declared else "; the flow declares none"
    return [
        Issue(
            f"variables.{str(name)[:64]}",
            f"'{str(name)[:64]}' is not a declared variable of flow '{flow.flow}'{hint}",
        )
        for name in given
        if name not in flow.variables
    ]


def coerce_cli_value(text: str) -> Any:
    """``--var k=v`` values: JSON where it parses (numbers, booleans), else the string."""
    import json

    try:
        return json.loads(text)
    except ValueError:
        return text
