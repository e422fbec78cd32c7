"""Text no store or wire can take: U+0000 (NUL) and lone surrogates.

PostgreSQL refuses U+0000 in ``text`` and ``jsonb`` (a ``DataError``), and a lone surrogate
(U+D800..U+DFFF unpaired, which JSON's ``\\ud800`` escape makes) cannot be encoded as UTF-8
at all, so one such character in a variable, a turn or a handler's state once stopped a
call's record from ever being written. Every intake either refuses them (where a person
can fix the input: the CLI, a contact file) or replaces each with U+FFFD (where the input
comes from a running call and refusing would lose the rest of it). Pure: workflows use it.
"""

from __future__ import annotations

import re
from typing import Any

REPLACEMENT = "\ufffd"
_UNSAFE = re.compile("[\x00\ud800-\udfff]")
_search = _UNSAFE.search


def unsafe_char(text: str) -> str | None:
    """What is wrong with ``text`` in words (never the text), or None when it is safe."""
    m = _UNSAFE.search(text)
    if m is None:
        return None
    ch = m.group()
    if ch == "\x00":
        return f"a NUL character (U+0000) at position {m.start()}"
    return f"a lone surrogate (U+{ord(ch):04X}) at position {m.start()}"


def find_unsafe(value: Any, where: str = "") -> str | None:
    """The first string in ``value`` (a JSON-like tree, keys included) holding a character
    no store can take, as ``<where>: <what>``; None when there is none."""
    if isinstance(value, str):
        what = unsafe_char(value)
        return f"{where or 'value'} contains {what}" if what else None
    if isinstance(value, dict):
        for k, v in value.items():
            name = f"{where}.{k}" if where else str(k)
            if isinstance(k, str) and (what := unsafe_char(k)):
                return f"a key of {where or 'the value'} contains {what}"
            if found := find_unsafe(v, _printable(name)):
                return found
        return None
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            if found := find_unsafe(v, f"{where}[{i}]"):
                return found
    return None


def has_unsafe(value: Any) -> bool:
    """Whether ``value`` holds such a character anywhere: :func:`find_unsafe` without the
    words, for the engine's events (plain loops, no names built on the way)."""
    if isinstance(value, str):
        return _search(value) is not None
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(k, str) and _search(k) is not None:
                return True
            if isinstance(v, (str, dict, list, tuple)) and has_unsafe(v):
                return True
        return False
    if isinstance(value, (list, tuple)):
        for v in value:
            if isinstance(v, (str, dict, list, tuple)) and has_unsafe(v):
                return True
    return False


def _printable(name: str) -> str:
    return _UNSAFE.sub(REPLACEMENT, name)[:80]


def scrub_text(text: str) -> str:
    return _UNSAFE.sub(REPLACEMENT, text) if _UNSAFE.search(text) else text


def scrub(value: Any) -> Any:
    """``value`` with every NUL and lone surrogate (in strings and keys) replaced by U+FFFD.
    The same object when there is nothing to replace, so the common case copies nothing
    (and builds nothing: one search per string, as on the agent's transition hot path)."""
    if not has_unsafe(value):
        return value
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, dict):
        out = {scrub_text(k) if isinstance(k, str) else k: scrub(v) for k, v in value.items()}
        return value if _same(value, out) else out
    if isinstance(value, list):
        items = [scrub(v) for v in value]
        return value if all(a is b for a, b in zip(value, items, strict=True)) else items
    if isinstance(value, tuple):
        items = [scrub(v) for v in value]
        return value if all(a is b for a, b in zip(value, items, strict=True)) else tuple(items)
    return value


def _same(a: dict[Any, Any], b: dict[Any, Any]) -> bool:
    if len(a) != len(b):  # two keys that differed only by what was replaced became one
        return False
    return all(k1 is k2 and v1 is v2 for (k1, v1), (k2, v2) in zip(a.items(), b.items(), strict=True))
