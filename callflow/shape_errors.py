"""Shape errors placed in the user's data: pydantic's errors on the user's own paths, with
a hint for a misspelt key and a plain word for a wrong type. Shared by loading a flow
(``loader.py``) and by the one-run validation that checks past them (``validate_shape.py``),
so neither imports the other."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from ringflow.callflow.errors import did_you_mean, join_path, short_repr
from ringflow.callflow.model import Flow


def _field_names(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model whose keys an error at ``loc`` is about (for 'did you mean' hints)."""
    from ringflow.callflow import model as m
    from ringflow.callflow import voice as v

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
        "global": m.GlobalNode,
        "voice": v.VoiceSettings,
        "tts": v.TtsChoice,
        "stt": v.SttChoice,
        "llm": v.LlmChoice,
        "endpointing": v.Endpointing,
        "interruption": v.Interruption,
        "background_audio": v.BackgroundAudio,
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
