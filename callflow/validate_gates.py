"""Gate conditions in ``flow validate``: a ``var`` must name a value the call can have.

A misspelt ``var`` (``tierr``) does not fail at run time: the value is simply missing, so
the condition is false on every call and the gate always takes another branch. So each
path is checked against what the flow declares: variables, extracted values, and the
``state`` keys it writes itself (capture entries, under the function's name, and action
nodes' ``save_as``). A ``state`` key only a handler could write is a warning.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from ringflow.callflow.errors import did_you_mean
from ringflow.callflow.graph import adjacency
from ringflow.callflow.model import Condition, Flow, FunctionEntry
from ringflow.callflow.reads import condition_names, extracted_names

_VAR_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")


class GateChecks:
    """Mixed into the validator, whose ``flow``, ``module``, ``known_names``, ``err`` and
    ``warn`` it uses."""

    flow: Flow
    module: Any
    known_names: set[str]
    _handler_source: str | None = None

    def err(self, path: str, msg: str) -> None: ...
    def warn(self, path: str, msg: str) -> None: ...

    def state_writers(self) -> dict[str, FunctionEntry | None]:
        """Keys of ``state`` the flow itself writes: capture entries (their arguments, under
        the function's name) and action nodes' ``save_as`` (a result of unknown shape)."""
        out: dict[str, FunctionEntry | None] = {}
        for fn in [*self.flow.global_functions, *(f for n in self.flow.nodes.values() for f in n.functions)]:
            if fn.capture:
                out[fn.name] = fn
        for node in self.flow.nodes.values():
            if node.type == "action" and node.save_as:
                out.setdefault(node.save_as, None)
        return out

    def handlers_mention(self, key: str) -> bool:
        """Whether the handlers module's source has ``key`` as a string literal: a handler
        plausibly writes ``flow_manager.state[key]``. Validation cannot run handlers, so
        this is as far as it can tell; a key no code mentions is most likely a typo."""
        if self.module is None:
            return False
        if self._handler_source is None:
            try:
                self._handler_source = inspect.getsource(self.module)
            except (OSError, TypeError):
                self._handler_source = ""
        return f'"{key}"' in self._handler_source or f"'{key}'" in self._handler_source

    def check_condition(self, path: str, cond: Condition) -> None:
        if cond.var is not None:
            self.check_var(f"{path}.var", cond.var)
        for key in ("all", "any"):
            for i, sub in enumerate(getattr(cond, key) or []):
                self.check_condition(f"{path}.{key}[{i}]", sub)

    def check_var(self, path: str, var: str) -> None:
        """A gate's ``var`` names a value the call can have: a variable, an extracted value,
        or a ``state`` key a capture or ``save_as`` writes. A misspelt one would make the
        condition silently false on every call."""
        if not _VAR_PATH.match(var):
            self.err(path, f"'{var}' is not a name or a dotted path (like 'tier' or 'state.order.total')")
            return
        parts = var.split(".")
        head = parts[0]
        writers = self.state_writers()
        if head == "state":
            if len(parts) == 1:
                return
            key = parts[1]
            if key in writers:
                fn = writers[key]
                props = (fn.parameters or {}).get("properties") if fn is not None else None
                if len(parts) > 2 and isinstance(props, dict) and parts[2] not in props:
                    self.err(
                        path,
                        f"capture '{key}' has no parameter '{parts[2]}'"
                        f"{did_you_mean(parts[2], [str(p) for p in props])}",
                    )
                return
            hint = did_you_mean(key, writers)
            if self.flow.handlers:
                if not self.handlers_mention(key):
                    self.warn(
                        path,
                        f"no capture, save_as or handler writes 'state.{key}'{hint}: until "
                        "something does, the condition sees no value",
                    )
            else:
                self.err(
                    path,
                    f"nothing writes 'state.{key}'{hint}: the flow has no handlers, and no "
                    "capture entry or action node's save_as has that name",
                )
            return
        if head in self.known_names:
            return
        options = sorted(self.known_names | {f"state.{k}" for k in writers})
        self.err(
            path,
            f"unknown value '{head}'{did_you_mean(head, options)}: a gate reads a declared "
            "variable, an extracted value, or 'state.<name>' (a capture, save_as or handler)",
        )

    def check_gate_waits(self) -> None:
        """A gate that reads a value extracted on a node leading straight to it always waits
        for that extraction (it starts as the call leaves that node): the caller hears the
        wait speech for an LLM call's time. A capture entry on that node has the value at
        once (``state.<name>``); a warning, since waiting is correct, only slower."""
        for src, dsts in adjacency(self.flow, include_globals=False).items():
            given = extracted_names(self.flow.nodes[src])
            for dst in sorted(dsts):
                gate = self.flow.nodes[dst]
                if not given or gate.type != "gate":
                    continue
                for i, br in enumerate(gate.branches or []):
                    read = sorted(condition_names(br.when) & given)
                    if read:
                        names = ", ".join(f"'{n}'" for n in read)
                        self.warn(
                            f"nodes.{dst}.branches[{i}].when",
                            f"reads {names}, extracted when the call leaves '{src}' just before "
                            "this gate: every call waits here for that extraction (the caller "
                            f"hears the wait speech); capture it with a function on '{src}' "
                            "instead (a capture entry, read as 'state.<function>.<field>')",
                        )
