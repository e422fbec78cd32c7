"""Reading a flow file into a validated :class:`FlowDefinition`, or a list of issues.

Anything a user can hand us (random bytes, deep nesting, YAML alias bombs, wrong
types) must come back as issues with paths, never as a traceback.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ringflow.callflow.errors import FlowError, Issue
from ringflow.callflow.model import FlowDefinition

if TYPE_CHECKING:
    from ringflow.callflow.subflow_use import VersionSource

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
    notes: list[Issue] = field(default_factory=list)  # nothing wrong, but worth knowing
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
            "notes": [n.as_dict() for n in self.notes],
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


def validate_data(
    data: Any,
    base_dir: Path | None = None,
    source: str | None = None,
    load_handlers: bool = True,
    *,
    chain: tuple[str, ...] = (),
    versions: VersionSource | None = None,
) -> ValidationReport:
    """Every check the spec names, on already-parsed data, in one run: after shape errors,
    the whole-flow rules still check what can be read (``callflow/validate_shape.py``).

    ``subflow`` nodes' flows are read too (``callflow/subflow_use.py``): files beside
    ``base_dir``, published versions through ``versions``; ``chain`` is the files being
    read that led here (a cycle of subflows is an error). A valid flow's definition holds
    their nodes."""
    from ringflow.callflow.subflow_use import inline, load_uses
    from ringflow.callflow.validate import semantic_checks
    from ringflow.callflow.validate_shape import check_shape
    from ringflow.callflow.validate_voice import voice_notes

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
        used, use_errors, use_warnings = load_uses(flow, base_dir, chain, versions, _read_used, load_handlers)
        handlers, errors, warnings = semantic_checks(flow, base_dir, load_handlers=load_handlers, used=used)
        report.errors.extend([*use_errors, *errors])
        report.warnings.extend([*use_warnings, *warnings])
        report.notes.extend(voice_notes(flow))
        if not report.errors:
            definition = FlowDefinition(flow=flow, handlers=handlers, source=source)
            report.definition = inline(definition, used)
        return report
    report.errors.extend(shaped.errors)
    if shaped.flow is not None:
        used, use_errors, use_warnings = load_uses(
            shaped.flow, base_dir, chain, versions, _read_used, load_handlers
        )
        _, errors, warnings = semantic_checks(
            shaped.flow,
            base_dir,
            load_handlers=load_handlers,
            unsure_nodes=shaped.unsure_nodes,
            judge_graph=shaped.judge_graph,
            names=shaped.names,
            used=used,
        )
        report.errors.extend(e for e in [*use_errors, *errors] if shaped.keeps(e))
        report.warnings.extend(w for w in [*use_warnings, *warnings] if shaped.keeps(w))
    return report


def validate_file(
    path: str | Path,
    load_handlers: bool = True,
    *,
    chain: tuple[str, ...] | None = None,
    versions: VersionSource | None = None,
) -> ValidationReport:
    """Raises FileNotFoundError only when the file cannot be read at all."""
    p = Path(path)
    data, issues = read_file(p)
    if issues:
        return ValidationReport(source=str(path), errors=issues)
    return validate_data(
        data,
        base_dir=p.parent,
        source=str(path),
        load_handlers=load_handlers,
        chain=(str(p.resolve()),) if chain is None else chain,
        versions=versions,
    )


def _read_used(
    path: Path, chain: tuple[str, ...], versions: VersionSource | None, load_handlers: bool
) -> ValidationReport:
    """A subflow node's used file, validated as a flow of its own, its handlers module
    imported from beside it when the calling flow's is (``callflow/subflow_use.py``)."""
    return validate_file(path, load_handlers=load_handlers, chain=chain, versions=versions)


def load_flow(path: str | Path, versions: VersionSource | None = None) -> FlowDefinition:
    """The definition, or :class:`FlowError` carrying every error found. ``versions`` reads
    the published versions ``subflow`` nodes may use (``use: NAME@VERSION``)."""
    report = validate_file(path, versions=versions)
    if report.definition is None:
        raise FlowError(report.errors, report.warnings)
    return report.definition
