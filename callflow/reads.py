"""Which call values each part of a flow reads: what must wait for a running extraction.

A node's values are extracted when the call leaves it, by an LLM call that takes a moment.
Whatever reads one of those values before it is known (a gate's condition, a prompt, a
greeting, a tool's description, an action's text, an action node's request, a function's
HTTP request or transfer) would read nothing and take its fallback, on one side of the call
and not the other. So the engine asks, before it renders or evaluates any of these, whether
it reads a value an extraction still running will give (``Draft.blocked``), and waits for
that extraction if so. Only the first name of a path counts (``order.total`` reads
``order``); ``state.*`` is never extracted.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from ringflow.callflow.model import Condition, Flow, FunctionEntry, Node
from ringflow.callflow.templating import TemplateSyntaxError, compile_template, strings_in

NONE: frozenset[str] = frozenset()


@lru_cache(maxsize=4096)
def template_names(text: str | None) -> frozenset[str]:
    """The first names of a template's placeholders (none for a template that does not parse:
    validation reports it, and the engine says it as written)."""
    if not text:
        return NONE
    try:
        return frozenset(p.path[0] for p in compile_template(text).placeholders)
    except TemplateSyntaxError:
        return NONE


def condition_names(cond: Condition | None) -> frozenset[str]:
    if cond is None:
        return NONE
    out = {cond.var.split(".")[0]} if cond.var else set()
    for sub in [*(cond.all or []), *(cond.any or [])]:
        out |= condition_names(sub)
    return frozenset(out)


def _strings(value: Any) -> frozenset[str]:
    out: set[str] = set()
    for text in strings_in(value):
        out |= template_names(text)
    return frozenset(out)


def function_reads(fn: FunctionEntry) -> frozenset[str]:
    """What running the function renders from the call's values: its HTTP request and its
    transfer (a handler gets its arguments and the state, not the values)."""
    out: set[str] = set()
    if fn.http is not None:
        out |= template_names(fn.http.url) | _strings(fn.http.headers) | _strings(fn.http.body)
    if fn.transfer is not None:
        out |= template_names(fn.transfer.to) | template_names(fn.transfer.announce)
    return frozenset(out)


def node_reads(flow: Flow, node: Node, descriptions: frozenset[str]) -> frozenset[str]:
    """What entering ``node`` renders or evaluates: its gate's conditions, its prompt (the
    role too unless ``add_role: false``), greeting, tool descriptions, actions' texts and an
    action node's request."""
    out: set[str] = set()
    if node.add_role:
        out |= template_names(flow.role)
    out |= template_names(node.task) | template_names(node.greeting)
    out |= descriptions  # the names its tools' descriptions read (handlers' from their docstrings)
    for act in [*node.pre_actions, *node.post_actions]:
        out |= template_names(act.tts_say) | template_names(act.end_conversation)
    for branch in node.branches or []:
        out |= condition_names(branch.when)
    if node.run is not None:
        out |= function_reads(node.run)
    for value in node.inputs.values():  # a subflow node's inputs, bound on entry
        out |= _strings(value)
    return frozenset(out)


def extracted_names(node: Node) -> frozenset[str]:
    return frozenset(x.name for x in node.extract)
