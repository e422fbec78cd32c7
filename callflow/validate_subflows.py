"""The rules of a ``subflow`` node, checked against the flow it uses (``subflow_use.py``).

Across the boundary: every input it binds is one of the used flow's variables (a misspelt
name is an error, not an input nobody reads), every variable the used flow requires is
bound, literal inputs have the variable's type, templated ones read names the calling flow
has; and where the call goes on, ``transition_to``, exists in the calling flow and, as a
branch table, routes on the used flow's end nodes (``end``), each of them covered.
"""

from __future__ import annotations

from typing import Any

from ringflow.callflow.errors import did_you_mean, short_repr
from ringflow.callflow.inputs import type_ok
from ringflow.callflow.model import BranchTable, Node
from ringflow.callflow.subflow_use import Used
from ringflow.callflow.subflows import RESULT_END
from ringflow.callflow.templating import TemplateSyntaxError, compile_template, strings_in
from ringflow.callflow.validate_checker import Checker

_OWN_KEYS = frozenset({"type", "use", "inputs", "transition_to"})


def check_subflow_node(c: Checker, nid: str, node: Node, used: Used | None) -> None:
    path = f"nodes.{nid}"
    for key in sorted(node.model_fields_set - _OWN_KEYS):
        shown = "global" if key == "global_" else key
        c.err(
            f"{path}.{shown}", f"'{shown}' does not apply to a subflow node (its nodes are the used flow's)"
        )
    if not node.use:
        c.err(
            f"{path}.use",
            "a subflow node needs 'use': the flow it runs (a file beside this one, or NAME@VERSION)",
        )
    if node.transition_to is None:
        c.err(
            f"{path}.transition_to",
            "a subflow node needs transition_to: where the call goes when the subflow ends",
        )
    else:
        c.check_transition(f"{path}.transition_to", node.transition_to)
    if used is None:  # it could not be read: load_uses said why
        return
    variables = used.flow.variables
    listed = ", ".join(sorted(variables)) or "none"
    for name, value in node.inputs.items():
        ipath = f"{path}.inputs.{name}"
        var = variables.get(name)
        if var is None:
            c.err(
                ipath,
                f"'{name}' is not an input of subflow {used.ref}{did_you_mean(name, variables)} "
                f"(its variables: {listed})",
            )
            continue
        texts = strings_in(value)
        for text in texts:
            c.check_template(ipath, text)
        if not _is_literal(value, texts):
            continue
        if not type_ok(var.type, value):
            c.err(ipath, f"subflow {used.ref} takes '{name}' as {var.type}, not {type(value).__name__}")
        elif var.enum is not None and value not in var.enum:
            c.err(ipath, f"{short_repr(value)} is not one of {var.enum} (subflow {used.ref})")
    for name, var in variables.items():
        if var.required and var.default is None and name not in node.inputs:
            c.err(f"{path}.inputs", f"subflow {used.ref} requires the input '{name}': bind it under inputs")
    _check_routes(c, path, node, used)


def _is_literal(value: Any, texts: list[str]) -> bool:
    """No placeholder anywhere in it: its value is known now, so its type can be checked."""
    for text in texts:
        try:
            if not compile_template(text).is_static:
                return False
        except TemplateSyntaxError:
            return False
    return True


def _check_routes(c: Checker, path: str, node: Node, used: Used) -> None:
    t = node.transition_to
    if not isinstance(t, BranchTable):
        return
    ends = used.end_nodes()
    tpath = f"{path}.transition_to"
    if t.field != RESULT_END:
        c.err(
            f"{tpath}.field",
            f"a subflow's result is the end node it finished on: branch on '{RESULT_END}' "
            f"(its end nodes: {', '.join(ends)}), or route on its state with a gate after it",
        )
        return
    for key in t.cases:
        if key not in ends:
            c.err(
                f"{tpath}.cases.{key}", f"subflow {used.ref} has no end node '{key}'{did_you_mean(key, ends)}"
            )
    missing = [e for e in ends if e not in t.cases]
    if missing and t.default is None:
        c.err(
            tpath,
            f"subflow {used.ref} can end on {', '.join(missing)}, which no case takes: add them or a default",
        )
