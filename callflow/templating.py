"""``{{name}}`` templates, compiled once so that rendering on the hot path is a join.

A template is parsed into literal text and placeholders when the flow is compiled;
validation reads the placeholders to find undefined names, and the engine renders
them against the call's values without touching a regex again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import quote

BUILTINS = frozenset({"current_time", "current_date", "caller_number", "called_number", "call_id"})

RAW_PREFIX = "raw:"
_PLACEHOLDER = re.compile(r"\{\{\s*(.*?)\s*\}\}", re.S)
_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")


@dataclass(frozen=True, slots=True)
class Placeholder:
    path: tuple[str, ...]
    fallback: str | None
    raw: bool = False  # ``{{raw:name}}``: put into a URL as written, not percent-encoded

    @property
    def name(self) -> str:
        return ".".join(self.path)


class TemplateSyntaxError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Template:
    parts: tuple[str | Placeholder, ...]

    @property
    def placeholders(self) -> tuple[Placeholder, ...]:
        return tuple(p for p in self.parts if isinstance(p, Placeholder))

    @property
    def is_static(self) -> bool:
        return all(isinstance(p, str) for p in self.parts)

    def render(self, values: Mapping[str, Any]) -> str:
        if self.is_static:
            return "".join(cast(tuple[str, ...], self.parts))  # is_static: every part is text
        out: list[str] = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
            else:
                out.append(_render_value(lookup(values, part.path), part.fallback))
        return "".join(out)


def compile_template(text: str) -> Template:
    """Parse once; raises :class:`TemplateSyntaxError` naming the bad placeholder."""
    parts: list[str | Placeholder] = []
    pos = 0
    for m in _PLACEHOLDER.finditer(text):
        if m.start() > pos:
            parts.append(text[pos : m.start()])
        inner = m.group(1)
        name, sep, fallback = inner.partition("|")
        name = name.strip()
        raw = name.startswith(RAW_PREFIX)
        if raw:
            name = name[len(RAW_PREFIX) :].strip()
        if not _PATH.match(name):
            raise TemplateSyntaxError(f"bad placeholder '{{{{{inner}}}}}': expected a name or a dotted path")
        parts.append(Placeholder(tuple(name.split(".")), fallback.strip() if sep else None, raw))
        pos = m.end()
    if pos < len(text):
        parts.append(text[pos:])
    return Template(tuple(parts))


_MISSING = object()


def lookup(values: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    """Follow a dotted path through mappings (and list indexes); ``None`` when absent."""
    cur: Any = values
    for key in path:
        if isinstance(cur, Mapping):
            cur = cur.get(key, _MISSING)
        elif isinstance(cur, list) and key.isdigit() and int(key) < len(cur):
            cur = cur[int(key)]
        else:
            return None
        if cur is _MISSING:
            return None
    return cur


def _render_value(value: Any, fallback: str | None) -> str:
    if value is None or value == "":
        return fallback if fallback is not None else ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def render_url(
    template: Template, values: Mapping[str, Any], arguments: frozenset[str] | set[str] = frozenset()
) -> str:
    """Render an HTTP entry's URL, percent-encoding every value that lands in its path,
    query or fragment, and every LLM argument (names in ``arguments``) wherever it lands.

    Values come from the call and from LLM arguments: unencoded, ``../../admin?x=1#`` in a
    path segment would reach another endpoint with the flow's credentials. A flow value
    before the path (``{{crm_base_url}}/companies``, ``https://{{host}}/``) is the URL's
    base and goes in as written; so does ``{{raw:name}}`` anywhere, for a flow that means
    its value to be a path or query string.
    """
    out: list[str] = []
    literal = ""  # the template's own text so far: where it has reached decides the encoding
    for part in template.parts:
        if isinstance(part, str):
            out.append(part)
            literal += part
            continue
        text = _render_value(lookup(values, part.path), part.fallback)
        if not part.raw and (_in_path(literal) or part.path[0] in arguments):
            text = _encode_component(text)
        out.append(text)
    return "".join(out)


def _in_path(literal: str) -> bool:
    """Whether text following ``literal`` is past the URL's scheme and authority."""
    _scheme, sep, rest = literal.partition("://")
    return any(c in (rest if sep else literal) for c in "/?#")


def _encode_component(text: str) -> str:
    """Everything but unreserved characters encoded; a bare dot segment too (``..``)."""
    if text in (".", ".."):
        return text.replace(".", "%2E")
    return quote(text, safe="")


def render_any(value: Any, values: Mapping[str, Any]) -> Any:
    """Render every string inside a JSON-like value as text (HTTP headers)."""
    if isinstance(value, str):
        return compile_template(value).render(values)
    if isinstance(value, list):
        return [render_any(v, values) for v in value]
    if isinstance(value, dict):
        return {k: render_any(v, values) for k, v in value.items()}
    return value


def render_json(value: Any, values: Mapping[str, Any]) -> Any:
    """Render every string inside a JSON value (an HTTP body). A string that is exactly one
    placeholder (``"{{count}}"``) becomes the value itself, with its JSON type: an API
    wants ``4``, ``true`` or a list, not ``"4"``, ``"yes"`` or their text. A missing value
    is the fallback (text) if there is one, else ``null``; any other string is text."""
    if isinstance(value, str):
        tpl = compile_template(value)
        if len(tpl.parts) == 1 and isinstance(ref := tpl.parts[0], Placeholder):
            found = lookup(values, ref.path)
            if found is None or found == "":
                return ref.fallback if ref.fallback is not None else found
            return found
        return tpl.render(values)
    if isinstance(value, list):
        return [render_json(v, values) for v in value]
    if isinstance(value, dict):
        return {k: render_json(v, values) for k, v in value.items()}
    return value


def strings_in(value: Any) -> list[str]:
    """Every string in a JSON-like value, for validation of templated bodies."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in strings_in(v)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings_in(v)]
    return []
