"""Conversation scripts (``ringflow call simulate``): the format and the expectations check."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from callflow.loader import parse_text
from ringflow.sim_phone import ScriptDial


class ScriptTurn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user: str | None = None
    llm: list[dict[str, Any]] | None = None
    silence: float | None = Field(None, gt=0)
    dtmf: str | None = Field(None, pattern=r"^[0-9*#A-Da-d]{1,64}$")  # the caller presses keys

    @model_validator(mode="after")
    def _one(self) -> ScriptTurn:
        if sum(x is not None for x in (self.user, self.silence, self.dtmf)) != 1:
            raise ValueError("a turn has either 'user' (with optional 'llm'), 'dtmf' (keys pressed, "
                             "with optional 'llm') or 'silence'")
        if self.silence is not None and self.llm:
            raise ValueError("a silence has no 'llm' replies: the idle re-prompt is generated")
        return self


class Expect(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: list[str] | None = None
    state: dict[str, Any] | None = None
    variables: dict[str, Any] | None = None
    disposition: str | None = None
    end_reason: str | None = None
    transfer: dict[str, Any] | None = None  # {to, mode}: the transfer asked of LiveKit


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid")

    flow: str
    dial: ScriptDial | None = None  # placed as a phone call first; without it already connected
    transfer_answer: Literal["human", "no_answer"] = "human"  # how a transfer's destination answers
    variables: dict[str, Any] = {}
    turns: list[ScriptTurn] = []
    extract: dict[str, dict[str, Any]] = {}
    expect: Expect = Expect()


class ScriptError(ValueError):
    pass


def is_flow_file(path: Path) -> bool:
    """A flow (``nodes``, no ``turns``) sitting beside the scripts that use it."""
    try:
        data = parse_text(path.read_text(encoding="utf-8"), path.name)
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(data, dict) and "nodes" in data and "turns" not in data


def load_script(path: Path) -> tuple[Script, Path]:
    """The script and its flow file's path (relative to the script)."""
    try:
        data = parse_text(path.read_text(encoding="utf-8"), path.name)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ScriptError(f"{path}: cannot read: {exc}") from None
    try:
        script = Script.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ScriptError(f"{path}: {where}: {first['msg']}") from None
    return script, (path.parent / script.flow)


def matches(expected: Any, actual: Any, where: str = "") -> list[str]:
    """Mappings match on the keys given (recursively); lists and scalars must be equal;
    numbers compare by value (360 equals 360.0)."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{where or 'value'}: expected a mapping, got {actual!r}"]
        out: list[str] = []
        for k, v in expected.items():
            sub = f"{where}.{k}" if where else str(k)
            if k not in actual:
                out.append(f"{sub}: missing (expected {v!r})")
            else:
                out.extend(matches(v, actual[k], sub))
        return out
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(expected) != len(actual):
            return [f"{where}: expected {expected!r}, got {actual!r}"]
        return [f for i, (e, a) in enumerate(zip(expected, actual, strict=True))
                for f in matches(e, a, f"{where}[{i}]")]
    numeric = (int, float)
    if (isinstance(expected, numeric) and isinstance(actual, numeric)
            and not isinstance(expected, bool) and not isinstance(actual, bool)):
        return [] if float(expected) == float(actual) else [f"{where}: expected {expected!r}, got {actual!r}"]
    if expected != actual or (type(expected) is bool and type(actual) is not bool):
        return [f"{where}: expected {expected!r}, got {actual!r}"]
    return []


def check(expect: Expect, result: dict[str, Any]) -> list[str]:
    failures: list[str] = []
    for key in ("path", "state", "variables", "disposition", "end_reason", "transfer"):
        want = getattr(expect, key)
        if want is not None:
            failures.extend(matches(want, result.get(key), key))
    return failures
