"""Vocabulary every importer shares: the result type, the error, warnings and names.

Other tools name things freely ("Billing question", "node-3", "Wants appointment!");
Ringflow ids and tool names follow strict patterns, so every importer turns names
into identifiers the same way and keeps them unique, and the rules live here once.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

from ringflow.callflow.errors import Issue, join_path

DocPath = tuple[str | int, ...]  # where in the imported document: its keys and list indices

IDENTIFIER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_NAME = 64

_NON_WORD = re.compile(r"[^a-z0-9]+")
_NON_FLOW = re.compile(r"[^a-z0-9_-]+")

VAR_TYPES = {
    "string": "string",
    "str": "string",
    "text": "string",
    "integer": "integer",
    "int": "integer",
    "number": "number",
    "float": "number",
    "double": "number",
    "decimal": "number",
    "boolean": "boolean",
    "bool": "boolean",
    "object": "object",
    "dict": "object",
    "json": "object",
    "array": "array",
    "list": "array",
}


class FlowImportError(ValueError):
    """The input is not a file of the named kind at all, so nothing can be converted.

    A ValueError so that callers (the CLI) can report it as bad input, not a crash.
    """


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` when it is an object, else an empty one: for optional sections of an export."""
    return value if isinstance(value, dict) else {}


def wrong_type(path: DocPath, what: str, expected: str, value: Any) -> FlowImportError:
    """A key holding a JSON value of the wrong kind (a list for a node's ``type``...).

    Such a file was not written by the source tool, so guessing what it meant would
    hide the problem: it is refused, naming the place and what was expected there.
    """
    where = join_path(path) or "the document"
    return FlowImportError(f"{where}: {what} must be {expected}, not {_json_kind(value)}")


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"a number ({value!r})"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


@dataclass
class ImportResult:
    """A converted flow plus everything that could not be carried over.

    The warnings are the user's to-do list after an import, so each names the source
    element by its path in the source file and by its id, name or type.
    """

    flow: dict[str, Any]
    warnings: list[Issue] = field(default_factory=list)


class Warnings:
    """Collects warnings with paths into the source document."""

    def __init__(self, root: DocPath = ()) -> None:
        self.root = root
        self.items: list[Issue] = []
        # what the source's own tool would fail on: the import is refused unless lenient
        self.broken: list[Issue] = []

    def add(self, path: DocPath, message: str) -> None:
        self.items.append(Issue(join_path((*self.root, *path)), message, "warning"))

    def add_broken(self, path: DocPath, message: str) -> None:
        """A warning that also refuses the import unless it is lenient (``refuse_broken``)."""
        self.add(path, message)
        self.broken.append(self.items[-1])

    def refuse_broken(self, lenient: bool, why: str) -> None:
        """Raise :class:`FlowImportError` listing every broken part, unless ``lenient``
        (then they stay warnings and the import goes on)."""
        if self.broken and not lenient:
            lines = "\n  ".join(str(b) for b in self.broken)
            raise FlowImportError(f"{why}, so it is not imported (--lenient imports it anyway):\n  {lines}")


def text(value: Any) -> str | None:
    """A non-blank string, stripped; anything else is treated as absent."""
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def label(value: Any) -> str:
    """A short printable form of an element's id or name for warning messages."""
    s = value if isinstance(value, str) else repr(value)
    return s if len(s) <= 40 else s[:37] + "..."


def _words(value: str) -> str:
    return _NON_WORD.sub("_", value.lower()).strip("_")


def node_id(value: Any) -> str:
    """A node id from a name or id, or '' when there is nothing usable in it."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        return ""
    base = _words(value)
    if base and not base[0].isalpha():
        base = f"node_{base}"
    return base[:MAX_NAME].rstrip("_")


def function_name(value: Any) -> str:
    """A tool name from a label; '' when the label has no letters or digits."""
    if not isinstance(value, str):
        return ""
    base = _words(value)
    if base and base[0].isdigit():
        base = f"fn_{base}"
    return base[:MAX_NAME].rstrip("_")


def flow_name(value: Any, default: str = "imported") -> str:
    """A flow name; hyphens are allowed in flow names, so they are kept."""
    if not isinstance(value, str):
        return default
    base = _NON_FLOW.sub("_", value.lower())
    base = re.sub(r"_+", "_", base).strip("_-")
    if base and not base[0].isalpha():
        base = f"flow_{base}"
    return base[:MAX_NAME].rstrip("_-") or default


class Names:
    """Hands out unique identifiers, suffixing ``_2``, ``_3``... on a clash.

    Suffixing rather than failing keeps an import going; callers warn when the name
    they got differs from the one the source used.
    """

    def __init__(self, taken: set[str] | None = None) -> None:
        self.taken: set[str] = set(taken or ())

    def claim(self, base: str) -> str:
        name = base
        n = 2
        while name in self.taken:
            suffix = f"_{n}"
            name = base[: MAX_NAME - len(suffix)] + suffix
            n += 1
        self.taken.add(name)
        return name


def var_type(value: Any) -> str | None:
    """A spec type for another tool's type name, or None when it has no equivalent."""
    if not isinstance(value, str):
        return None
    return VAR_TYPES.get(value.strip().lower())


def type_of_value(value: Any) -> str:
    """The spec type a default value implies, for variables given only by example."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return "string"


def variables_from_defaults(values: Any, path: DocPath, w: Warnings) -> dict[str, Any]:
    """Call inputs given as ``{name: default}`` (Pipecat ``context``, Dograh template vars)."""
    if values is None:
        return {}
    if not isinstance(values, dict):
        w.add(
            path,
            f"expected a mapping of variable names to defaults, got {type(values).__name__}; not carried",
        )
        return {}
    out: dict[str, Any] = {}
    for key, value in values.items():
        if not isinstance(key, str) or not IDENTIFIER_RE.match(key):
            w.add(path, f"variable {label(key)} is not a name templates can use; not carried")
            continue
        entry: dict[str, Any] = {"type": type_of_value(value)}
        if value is not None:
            entry["default"] = copy.deepcopy(value)  # the flow must not share the input's objects
        out[key] = entry
    return out
