"""Reading a flow file into a validated :class:`FlowDefinition`, or a list of issues.

Anything a user can hand us (random bytes, deep nesting, YAML alias bombs, wrong
types) must come back as issues with paths, never as a traceback.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from ringflow.callflow.errors import FlowError, Issue, did_you_mean, join_path, short_repr
from ringflow.callflow.model import Flow, FlowDefinition

MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_DEPTH = 64
MAX_ELEMENTS = 200_000

_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


_NONE = object()


class _Loader(_Base):  # type: ignore[misc, valid-type]
    """A safe loader that refuses duplicate keys instead of keeping the last one silently.

    In a branch table ``true`` and ``1`` are the same Python key (``True == 1``), and a
    repeated node id would drop a whole node: both are mistakes worth an error.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                prior = seen.get(key, _NONE)  # a dict lookup: True and 1 collide as in the result
            except TypeError:
                continue  # an unhashable key: the base constructor reports it
            if prior is not _NONE:
                why = "" if type(prior) is type(key) else f" (it is the same key as {prior!r})"
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}{why}", key_node.start_mark
                )
            seen[key] = key
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


@dataclass
class ValidationReport:
    source: str | None = None
    errors: list[Issue] = field(default_factory=list)
    warnings: list[Issue] = field(default_factory=list)
    definition: FlowDefinition | None = None

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": self.source,
            "valid": self.ok,
            "errors": [e.as_dict() for e in self.errors],
            "warnings": [w.as_dict() for w in self.warnings],
        }


def parse_text(text: str, name: str = "<flow>") -> Any:
    """YAML is a superset of JSON, but JSON errors read better from the JSON parser."""
    try:
        return _parse(text, name)
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels") from None


def _parse(text: str, name: str) -> Any:
    stripped = text.lstrip()
    if name.endswith(".json") or stripped.startswith(("{", "[")):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            if name.endswith(".json"):
                raise ValueError(f"not valid JSON: {exc}") from None
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        raise ValueError(" ".join(f"not valid YAML: {exc}".split())) from None


def check_bounds(data: Any, max_depth: int = MAX_DEPTH, max_elements: int = MAX_ELEMENTS) -> str | None:
    """Refuse shapes no flow has: absurd depth or size (including alias expansion)."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    seen = 0
    while stack:
        value, depth = stack.pop()
        seen += 1
        if seen > max_elements:
            return f"more than {max_elements} elements"
        if depth > max_depth:
            return f"nested deeper than {max_depth} levels"
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
            stack.extend((k, depth + 1) for k in value if not isinstance(k, str | int | float | bool))
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    return None


def read_file(path: Path) -> tuple[Any, list[Issue]]:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            return None, [Issue("", f"file is {size} bytes; a flow may be at most {MAX_FILE_BYTES}")]
        raw = path.read_bytes()
    except OSError as exc:
        raise FileNotFoundError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, [Issue("", f"not UTF-8 text (byte {exc.start})")]
    try:
        return parse_text(text, path.name), []
    except ValueError as exc:
        return None, [Issue("", str(exc))]


def _field_names(model: type[BaseModel]) -> list[str]:
    return list(model.model_fields)


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model whose keys an error at ``loc`` is about (for 'did you mean' hints)."""
    from ringflow.callflow import model as m

    tail = [p for p in loc if isinstance(p, str)]
    if not tail:
        return Flow
    parent = tail[-2] if len(tail) >= 2 else ""
    by_parent: dict[str, type[BaseModel]] = {
        "settings": m.FlowSettings,
        "idle": m.IdleSettings,
        "http": m.HttpSpec,
        "retry": m.Retry,
        "run": m.FunctionEntry,
        "functions": m.FunctionEntry,
        "global_functions": m.FunctionEntry,
        "transition_to": m.BranchTable,
        "when": m.Condition,
        "branches": m.GateBranch,
        "extract": m.ExtractSpec,
        "pre_actions": m.Action,
        "post_actions": m.Action,
        "variables": m.Variable,
        "nodes": m.Node,
    }
    if len(tail) >= 3 and tail[-3] in ("nodes", "variables"):
        return by_parent[tail[-3]]
    return by_parent.get(parent, Flow if len(tail) == 1 else None)


_SCALAR_TAGS = frozenset({"str", "int", "float", "bool"})


def _data_path(data: Any, loc: tuple[Any, ...]) -> tuple[list[str | int], bool]:
    """Map a pydantic ``loc`` onto the user's data, dropping union-member tags.

    Returns the path and whether a dropped tag disagreed with the data's type (an
    error from a union member the user clearly did not mean).
    """
    path: list[str | int] = []
    cur = data
    mismatch = False
    for i, part in enumerate(loc):
        if isinstance(cur, dict) and part in cur:
            path.append(part)
            cur = cur[part]
        elif isinstance(cur, list) and isinstance(part, int) and part < len(cur):
            path.append(part)
            cur = cur[part]
        elif part in _SCALAR_TAGS and isinstance(cur, dict | list):
            mismatch = True  # the scalar member of a union, and the user gave a mapping or list
        elif i == len(loc) - 1 and isinstance(cur, dict):
            path.append(part)  # a missing or unknown key: name it
        elif isinstance(part, str) and part[:1].isupper() and not isinstance(cur, dict):
            mismatch = True  # a model member of a union, and the user gave a scalar
    return path, mismatch


def _pattern_message(value: Any, pattern: str, loc: tuple[Any, ...] = ()) -> str:
    """Say what a name must look like, with a fixed-up suggestion, rather than show a regex."""
    from ringflow.callflow.model import FLOW_NAME_PATTERN, FUNCTION_NAME_PATTERN

    text = str(value)
    shown = short_repr(text, 70)[1:-1]
    size = f" (it has {len(text)})" if len(text) > 64 else ""
    if pattern == FUNCTION_NAME_PATTERN:
        fixed = re.sub(r"[^A-Za-z0-9_]", "_", text)
        fixed = (fixed if re.match(r"[A-Za-z_]", fixed) else f"_{fixed}")[:64]
        what = "an extracted value's name" if "extract" in loc else "a function name"
        return (
            f"'{shown}' is not valid as {what}: use letters, digits and '_' only, not starting "
            f"with a digit, at most 64 characters{size} (try '{fixed}')"
        )
    if pattern == FLOW_NAME_PATTERN:
        fixed = re.sub(r"[^a-z0-9_-]", "_", text.lower()).lstrip("_-0123456789")[:64]
        hint = f" (try '{fixed}')" if fixed else ""
        return (
            f"'{shown}' is not a valid flow name: use lower-case letters, digits, '_' and '-', "
            f"starting with a letter, at most 64 characters{size}{hint}"
        )
    return f"{text!r} does not match the pattern {pattern}"


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing"
    return short_repr(value)


def _non_text_key(data: Any, loc: tuple[Any, ...]) -> bool:
    """Whether a trailing ``[key]`` in ``loc`` is pydantic's mark for a mapping key that is
    not text (``(..., 1, "[key]")``, ``"None"`` for ``None``), not a key the user wrote as
    ``"[key]"`` (unknown or wrong, like any other): only then is the part before it a
    non-text key, as pydantic shows it, of the mapping that ``loc`` reaches before it."""
    if len(loc) < 2 or loc[-1] != "[key]":
        return False
    parent, _ = _data_path(data, loc[:-2])
    cur = data
    for part in parent:
        try:
            cur = cur[part]
        except (KeyError, IndexError, TypeError):
            return False
    return isinstance(cur, dict) and any(
        not isinstance(k, str) and (k == loc[-2] or str(k) == loc[-2]) for k in cur
    )


@dataclass(frozen=True)
class Located:
    """One shape error, placed in the user's data: ``parts`` is its path there."""

    parts: tuple[str | int, ...]
    message: str
    kind: str

    @property
    def path(self) -> str:
        return join_path(self.parts)


def pydantic_issues(data: Any, exc: ValidationError) -> list[Issue]:
    return [Issue(x.path, x.message) for x in located_errors(data, exc)]


def located_errors(data: Any, exc: ValidationError) -> list[Located]:
    """The errors as the user should read them: on the user's paths, each once, without
    the complaints of a union's member the data was plainly not meant as."""
    raw: list[tuple[tuple[str | int, ...], str, bool, str]] = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        kind = err["type"]
        if kind == "invalid_key" or _non_text_key(data, loc):
            # a key that is not text (YAML ``1:``, ``~:``, ``true:``): name it, say what to do
            key = loc[-1] if kind == "invalid_key" else loc[-2]
            parent, _ = _data_path(data, loc[:-1] if kind == "invalid_key" else loc[:-2])
            raw.append(((*parent, str(key)), f"key {key!r} must be text: quote it or rename it", False, kind))
            continue
        path_parts, mismatch = _data_path(data, loc)
        if kind == "extra_forbidden":
            key = str(loc[-1])
            model = _model_at(loc)
            hint = did_you_mean(key, _field_names(model)) if model else ""
            msg = f"unknown key '{key}'{hint}"
        elif kind == "missing":
            msg = f"required key '{loc[-1]}' is missing"
        elif kind == "string_pattern_mismatch":
            msg = _pattern_message(err.get("input"), str((err.get("ctx") or {}).get("pattern", "")), loc)
        else:
            msg = err["msg"]
            if msg.startswith("Value error, "):
                msg = msg[len("Value error, ") :]
            msg = msg[0].lower() + msg[1:] if msg else msg
            if kind.endswith(("_type", "_parsing")) or kind in ("literal_error", "enum"):
                msg += f" (got {_describe(err.get('input'))})"
        raw.append((tuple(path_parts), msg, mismatch, kind))
    kept_paths = {join_path(p) for p, _, mm, _ in raw if not mm}
    out: list[Located] = []
    seen: set[tuple[str, str]] = set()
    for parts, msg, mismatch, kind in raw:
        path = join_path(parts)
        if mismatch and any(k == path or k.startswith(path) for k in kept_paths):
            continue
        if (path, msg) not in seen:
            seen.add((path, msg))
            out.append(Located(parts, msg, kind))
    return out


def validate_data(
    data: Any, base_dir: Path | None = None, source: str | None = None, load_handlers: bool = True
) -> ValidationReport:
    """Every check the spec names, on already-parsed data, in one run: after shape errors,
    the whole-flow rules still check what can be read (``callflow/validate_shape.py``)."""
    from ringflow.callflow.validate import semantic_checks
    from ringflow.callflow.validate_shape import check_shape

    report = ValidationReport(source=source)
    if not isinstance(data, dict):
        report.errors.append(Issue("", f"a flow is a mapping at the top level, not {type(data).__name__}"))
        return report
    problem = check_bounds(data)
    if problem:
        report.errors.append(Issue("", problem))
        return report
    try:
        shaped = check_shape(data)
    except RecursionError:
        report.errors.append(Issue("", f"nested deeper than {MAX_DEPTH} levels"))
        return report
    if not shaped.errors and shaped.flow is not None:
        flow = shaped.flow
        handlers, errors, warnings = semantic_checks(flow, base_dir, load_handlers=load_handlers)
        report.errors.extend(errors)
        report.warnings.extend(warnings)
        if not report.errors:
            report.definition = FlowDefinition(flow=flow, handlers=handlers, source=source)
        return report
    report.errors.extend(shaped.errors)
    if shaped.flow is not None:
        _, errors, warnings = semantic_checks(
            shaped.flow,
            base_dir,
            load_handlers=load_handlers,
            unsure_nodes=shaped.unsure_nodes,
            judge_graph=shaped.judge_graph,
            names=shaped.names,
        )
        report.errors.extend(e for e in errors if shaped.keeps(e))
        report.warnings.extend(w for w in warnings if shaped.keeps(w))
    return report


def validate_file(path: str | Path, load_handlers: bool = True) -> ValidationReport:
    """Raises FileNotFoundError only when the file cannot be read at all."""
    p = Path(path)
    data, issues = read_file(p)
    if issues:
        return ValidationReport(source=str(path), errors=issues)
    return validate_data(data, base_dir=p.parent, source=str(path), load_handlers=load_handlers)


def load_flow(path: str | Path) -> FlowDefinition:
    """The definition, or :class:`FlowError` carrying every error found."""
    report = validate_file(path)
    if report.definition is None:
        raise FlowError(report.errors, report.warnings)
    return report.definition
