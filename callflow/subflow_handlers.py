"""Whose handlers module a function runs from: the calling flow's, or a used flow's.

A used flow (``callflow/subflow_use.py``) may name a ``handlers`` module of its own, found
beside its own file as any flow's is. Its nodes are inlined under ``<node>.``, and so are
its handler specs: ``definition.handlers`` holds the calling flow's by function name and
a used flow's by ``<subflow node>.<name>`` (``verify.check_dob``), so two modules may both
have a ``check_dob`` and each node's function resolves to its own flow's. The tool the LLM
sees keeps the plain name.

The used flow's file is where its module is looked for, as the calling flow's file is for
the caller's: the ``use`` paths from the calling flow's file down the scope, joined as text
(no file is read here; the workflow runs this). A published version's ``handlers`` hashes
name a used flow's module ``<module>@<that file, relative to the calling flow's folder>``:
module names have no ``@``, and the worker finds the file the same way.
"""

from __future__ import annotations

import posixpath

from ringflow.callflow.model import FlowDefinition
from ringflow.callflow.subflow_use import is_version_ref
from ringflow.callflow.subflows import SEP, scope_of

AT = "@"  # between a used flow's module and its file, in a version's handler hashes


def handler_key(scope: str, name: str) -> str:
    """The key of the handler ``name`` of the flow at ``scope`` in ``definition.handlers``."""
    return f"{scope}{SEP}{name}" if scope else name


def handler_scope(definition: FlowDefinition, node_id: str, name: str) -> str:
    """Whose flow's handler ``name`` is, in a function of the node ``node_id`` itself (not
    one of the calling flow's global functions, which are always the caller's): the
    innermost subflow around the node that has that handler, else the innermost with a
    handlers module (a definition validated without importing handlers has no specs), else
    the calling flow ("")."""
    chain: list[str] = []
    scope = scope_of(node_id)
    while scope:
        chain.append(scope)
        scope = scope_of(scope)
    for s in chain:
        if handler_key(s, name) in definition.handlers:
            return s
    for s in chain:
        spec = definition.subflows.get(s)
        if spec is not None and spec.handlers:
            return s
    return ""


def used_file(definition: FlowDefinition, scope: str) -> str | None:
    """The file of the flow the subflow node ``scope`` uses, relative to the calling flow's
    folder (``flows/verify.yaml``); None for the calling flow itself, or when a flow on the
    way is a published version (``NAME@VERSION``, no file)."""
    if not scope:
        return None
    parts = scope.split(SEP)
    rel = "."
    for i in range(1, len(parts) + 1):
        spec = definition.subflows.get(SEP.join(parts[:i]))
        if spec is None or is_version_ref(spec.use):
            return None
        rel = posixpath.join(posixpath.dirname(rel) if i > 1 else "", spec.use)
    return posixpath.normpath(rel)


def handler_module(definition: FlowDefinition, scope: str) -> tuple[str, str | None]:
    """The handlers module of the flow at ``scope`` (``handler_scope``), and the flow file it
    is found beside (as the worker's ``flow_source``). ``("", ...)``: that flow names none."""
    if not scope:
        return definition.flow.handlers or "", definition.source
    spec = definition.subflows.get(scope)
    rel = used_file(definition, scope)
    if spec is None or not spec.handlers or rel is None:
        return "", definition.source
    base = posixpath.dirname(definition.source) if definition.source else ""
    return spec.handlers, posixpath.normpath(posixpath.join(base, rel))


def module_keys(definition: FlowDefinition) -> dict[str, tuple[str, str | None]]:
    """Every handlers module the definition's functions run from, by the key its hash has
    in a published version (``<module>`` or ``<module>@<used flow's file>``): the module
    and the used flow's file relative to the calling flow's folder (None: the caller's)."""
    out: dict[str, tuple[str, str | None]] = {}
    if definition.flow.handlers:
        out[definition.flow.handlers] = (definition.flow.handlers, None)
    for scope, spec in definition.subflows.items():
        rel = used_file(definition, scope)
        if spec.handlers and rel is not None:
            out[f"{spec.handlers}{AT}{rel}"] = (spec.handlers, rel)
    return out


__all__ = ["AT", "handler_key", "handler_module", "handler_scope", "module_keys", "used_file"]
