"""Problems found in a flow, each with the dotted path of the place it concerns."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

Severity = Literal["error", "warning", "note"]  # a note: worth knowing, nothing wrong


@dataclass(frozen=True)
class Issue:
    path: str
    message: str
    severity: Severity = "error"

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message

    def as_dict(self) -> dict[str, str]:
        d = asdict(self)
        d.pop("severity")
        return d


class FlowError(Exception):
    """A flow that cannot be used; carries every error found, not only the first."""

    def __init__(self, errors: Sequence[Issue], warnings: Sequence[Issue] = ()) -> None:
        self.errors = list(errors)
        self.warnings = list(warnings)
        super().__init__("; ".join(str(e) for e in self.errors) or "invalid flow")


def join_path(parts: Iterable[str | int]) -> str:
    """``("nodes", "a", "functions", 1, "name")`` → ``nodes.a.functions[1].name``."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += f".{p}" if out else str(p)
    return out


def did_you_mean(word: str, options: Iterable[str]) -> str:
    """A fix hint, or an empty string when nothing is close."""
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def short_repr(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def safe_reason(exc: BaseException, limit: int = 300) -> str:
    """Why a payload was refused, without quoting it: a pydantic error's locations and
    error kinds (its message repeats the input, a caller's words or an SSN); for anything
    else only the exception's type, since its message may quote the payload too."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            items = errors(include_url=False, include_input=False, include_context=False)
        except TypeError:
            items = None
        if isinstance(items, list):
            parts = [
                f"{'.'.join(str(p) for p in e.get('loc', ())) or '(root)'}: {e.get('type', '?')}"
                for e in items[:5]
            ]
            more = f" (+{len(items) - 5} more)" if len(items) > 5 else ""
            return f"{type(exc).__name__}: {'; '.join(parts)}{more}"[:limit]
    return type(exc).__name__
