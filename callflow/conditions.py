"""Gate conditions and branch-table matching: pure functions of the call's values."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from ringflow.callflow.model import BranchTable, Condition, canonical
from ringflow.callflow.templating import lookup


def _num(x: Any) -> float | None:
    if isinstance(x, bool):
        return None
    if isinstance(x, int | float | str):
        try:
            return float(x)
        except (ValueError, OverflowError):  # not a number, or an int beyond float range
            return None
    return None


def _equal(a: Any, b: Any) -> bool:
    if a == b and type(a) is type(b):
        return True
    na, nb = _num(a), _num(b)
    if na is not None and nb is not None:
        return na == nb
    return canonical(a) == canonical(b)


_Comparable = TypeVar("_Comparable", int, float, str)


def _compare(x: _Comparable, y: _Comparable, op: str) -> bool:
    return {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y}[op]


def _order(a: Any, b: Any, op: str) -> bool:
    na, nb = _num(a), _num(b)
    if type(a) is int and type(b) is int:  # exact, even beyond float range
        return _compare(a, b, op)
    if na is not None and nb is not None:
        return _compare(na, nb, op)
    if isinstance(a, str) and isinstance(b, str):
        return _compare(a, b, op)
    return False


def holds(cond: Condition, values: Mapping[str, Any]) -> bool:
    """Never raises: a comparison between incomparable values is simply false."""
    if cond.all is not None:
        return all(holds(c, values) for c in cond.all)
    if cond.any is not None:
        return any(holds(c, values) for c in cond.any)
    actual = lookup(values, tuple((cond.var or "").split(".")))
    op, expected = cond.op, cond.value
    if op == "exists":
        return actual is not None
    if op == "not_exists":
        return actual is None
    if op == "==":
        return _equal(actual, expected)
    if op == "!=":
        return not _equal(actual, expected)
    if op in ("<", "<=", ">", ">="):
        return _order(actual, expected, op)
    if op in ("in", "not_in"):
        pool = expected if isinstance(expected, list) else [expected]
        found = any(_equal(actual, x) for x in pool)
        return found if op == "in" else not found
    if op == "contains":
        if isinstance(actual, str):
            return isinstance(expected, str) and expected in actual
        if isinstance(actual, list):
            return any(_equal(x, expected) for x in actual)
        if isinstance(actual, dict):
            return canonical(expected) in {canonical(k) for k in actual}
        return False
    return False


class BranchError(ValueError):
    """The result cannot be branched on; the message is given to the LLM."""


def resolve_branch(table: BranchTable, result: Any) -> str | None:
    """The target node for ``result``, or None to stay on the node."""
    if not isinstance(result, Mapping) or table.field not in result:
        raise BranchError(
            f"the result must be an object with a '{table.field}' field to decide where the call goes"
        )
    key = canonical(result[table.field])
    target = table.cases.get(key)
    return target if target is not None else table.default
