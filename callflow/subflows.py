"""Subflows at run time: entering one, returning from it, and whose values are whose.

A ``subflow`` node runs another flow's nodes, inlined into the definition under the node's
id (``verify.ask_dob`` is the used flow's ``ask_dob``, entered from the node ``verify``;
``callflow/subflow_use.py``). A node's *scope* is the id before its last dot: ``verify``
for ``verify.ask_dob``, the empty string for the calling flow's own nodes.

While a subflow runs, the call's ``variables`` are its inputs alone, and its ``extracted``
values and ``state`` start empty: the used flow is written against its own variables, not
against every flow that may use it, and what it captures cannot overwrite the caller's
values by chance. The calling flow's values wait in the :class:`SubflowFrame` pushed on
entry. When the subflow reaches one of its ``end`` nodes, the frame is popped: the caller's
values come back, the subflow's extracted values join them (its outputs), and its result
``{"end": <end node>, "state": <its state>}`` is kept under ``state.<node>``, which the
calling node's ``transition_to`` routes on.

Everything here is a function of the call's state, run by the one engine both sides share:
the agent and the workflow push and pop the same frames at the same steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ringflow.callflow.inputs import type_ok
from ringflow.callflow.model import SubflowSpec
from ringflow.callflow.state import CallState, SubflowFrame
from ringflow.callflow.templating import TemplateSyntaxError, render_json

SEP = "."  # between a subflow node's id and the used flow's node ids (never in a written id)
RESULT_END = "end"  # the key of the result naming the end node the subflow finished on


def scope_of(node_id: str) -> str:
    """The ``subflow`` node whose subflow ``node_id`` is part of ("" for the flow's own)."""
    return node_id.rpartition(SEP)[0]


def inside(node_id: str, scope: str) -> bool:
    """Whether ``node_id`` belongs to the subflow of ``scope`` (or one it uses in turn)."""
    return not scope or node_id.startswith(scope + SEP)


def local_id(node_id: str) -> str:
    """The id the used flow gives the node: ``done`` for ``verify.done``."""
    return node_id.rpartition(SEP)[2]


def returns_at(state: CallState, node_id: str) -> bool:
    """Whether entering ``node_id`` (an end node) ends the innermost open subflow."""
    return bool(state.subflows) and scope_of(node_id) == state.subflows[-1].node


def bind(
    spec: SubflowSpec, inputs: Mapping[str, Any], values: Mapping[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """The subflow's variables from the node's ``inputs``, rendered in the caller's values
    (a string that is one placeholder keeps the value's type, as in an HTTP body), with the
    used flow's defaults. A value of the wrong type, outside the ``enum`` or missing where
    required is a problem (said in a ``Rejected``), and the default (or nothing) is used:
    the call goes on."""
    out: dict[str, Any] = {}
    problems: list[str] = []
    for name, var in spec.variables.items():
        value = None
        if name in inputs:
            try:
                value = render_json(inputs[name], values)
            except TemplateSyntaxError as exc:  # validation refuses it; a hand-built definition
                problems.append(f"input '{name}': {exc}")
        if value is not None and not type_ok(var.type, value):
            problems.append(f"input '{name}': expected {var.type}, got {type(value).__name__}")
            value = None
        elif value is not None and var.enum is not None and value not in var.enum:
            problems.append(f"input '{name}': {str(value)[:60]!r} is not one of {var.enum}")
            value = None
        if value is None:
            value = var.default
            if value is None and var.required:
                problems.append(f"input '{name}' is required and has no value")
        out[name] = value
    return out, problems


def push(call: CallState, node_id: str, variables: dict[str, Any]) -> None:
    """Enter the subflow of ``node_id``: the caller's values into a frame, the inputs in."""
    frame = SubflowFrame(node=node_id, variables=call.variables, extracted=call.extracted, state=call.state)
    call.subflows = [*call.subflows, frame]
    call.variables, call.extracted, call.state = variables, {}, {}


def pop(call: CallState, end_node: str | None) -> dict[str, Any]:
    """Leave the innermost subflow (at ``end_node``, or None when the call ended inside
    it): the caller's values back, with the subflow's outputs. Returns its result."""
    frame = call.subflows[-1]
    result = {RESULT_END: local_id(end_node) if end_node is not None else None, "state": call.state}
    call.subflows = call.subflows[:-1]
    call.variables = frame.variables
    call.extracted = {**frame.extracted, **call.extracted}
    call.state = {**frame.state, local_id(frame.node): result}  # as the calling flow names it
    return result


def unwind(call: CallState) -> None:
    """The call ended inside subflows: each returns, so the call's record holds the
    calling flow's values (and the subflows' outputs), as after any other end."""
    while call.subflows:
        pop(call, None)


def add_extracted(call: CallState, node_id: str, kept: dict[str, Any]) -> None:
    """An extraction of ``node_id`` gave ``kept``: into the values of the scope it belongs to
    (the innermost open one holding it). A subflow that has returned already gave its values
    to its caller, so a late result goes there too; one of the caller's nodes that answers
    while a subflow runs goes to the caller's frame, not into the subflow."""
    frames = call.subflows
    depth = 0
    for i, frame in enumerate(frames):
        if inside(node_id, frame.node):
            depth = i + 1
    if depth == len(frames):
        call.extracted = {**call.extracted, **kept}
        return
    frame = frames[depth]
    updated = frame.model_copy(update={"extracted": {**frame.extracted, **kept}})
    call.subflows = [*frames[:depth], updated, *frames[depth + 1 :]]
