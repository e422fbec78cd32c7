"""Conversation scripts (``ringflow call simulate``): the format and the expectations check."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ringflow.activities.netguard import allowed_networks
from ringflow.callflow.errors import did_you_mean
from ringflow.callflow.loader import parse_text
from ringflow.simulation.device import ScriptDevice
from ringflow.simulation.jobs import ScriptJob
from ringflow.simulation.phone import ScriptDial


class ScriptTurn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user: str | None = None
    llm: list[dict[str, Any]] | None = None
    silence: float | None = Field(None, gt=0)
    dtmf: str | None = Field(None, pattern=r"^[0-9*#A-Da-d]{1,64}$")  # the caller presses keys
    # speech with no words (``user: ""``): an empty transcript, or on a ``listen: manual``
    # node a push-to-talk turn ended with nothing said; an empty input like a silence
    empty: bool = False
    # audio only (``--audio``): the caller starts this line this long into the agent's reply
    # (a barge-in); in text mode the line is said after the reply, as any other
    interrupt_after_s: float | None = Field(None, gt=0, le=60)
    # audio only: a burst of noise with no words this long (a false interruption); nothing in text mode
    noise: float | None = Field(None, gt=0, le=10)
    # the model takes this long over each answer of this turn (a real LLM's time to first
    # token): on audio the agent thinks that long, so its thinking sound is heard
    llm_delay_s: float | None = Field(None, gt=0, le=30)
    # A supervisor (ringflow/simulation/supervisor.py): with ``takeover: true`` they take the
    # call over and say this; during a takeover they say it to the caller; with ``handback:
    # NODE`` (or ``true``: where the bot was) they say it and give the call back, the bot's
    # first reply then in ``llm``; while the bot has the call, it is a whisper to the bot.
    supervisor: str | None = Field(None, min_length=1, max_length=2000)
    takeover: bool = False
    handback: str | bool | None = None

    @model_validator(mode="after")
    def _one(self) -> ScriptTurn:
        kinds = (self.user, self.silence, self.dtmf, self.noise, self.supervisor)
        if sum(x is not None for x in kinds) != 1:
            raise ValueError(
                "a turn has either 'user' (with optional 'llm'), 'dtmf' (keys pressed, "
                "with optional 'llm'), 'silence', 'noise' or 'supervisor'"
            )
        if (self.takeover or self.handback is not None) and self.supervisor is None:
            raise ValueError("'takeover' and 'handback' go on a 'supervisor' turn")
        if self.takeover and self.handback is not None:
            raise ValueError("a turn takes the call over or hands it back, not both")
        if self.handback is False:
            raise ValueError("'handback' is the node the bot resumes at, or true for where it was")
        if self.supervisor is not None and self.llm and self.handback is None:
            raise ValueError("only a hand-back has 'llm' replies (the bot's first turn after it)")
        if self.noise is not None and self.llm:
            raise ValueError("a noise has no 'llm' replies: it is no turn of the caller's")
        if self.interrupt_after_s is not None and (self.user is None or self.empty):
            raise ValueError("'interrupt_after_s' is when a 'user' line starts over the agent's reply")
        if self.silence is not None and self.llm:
            raise ValueError("a silence has no 'llm' replies: the idle re-prompt is generated")
        if self.empty and self.user != "":
            raise ValueError("'empty: true' is speech with no words: give it 'user: \"\"'")
        if self.user is not None and not self.user.strip() and not self.empty:
            raise ValueError(
                "'user' is empty: write what the caller says, or add 'empty: true' for speech with no words"
            )
        if self.empty and self.llm:
            raise ValueError("an empty turn has no 'llm' replies: the idle re-prompt is generated")
        return self


class Expect(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: list[str] | None = None
    state: dict[str, Any] | None = None
    variables: dict[str, Any] | None = None
    disposition: str | None = None
    end_reason: str | None = None
    transfer: dict[str, Any] | None = None  # {to, mode}: the transfer asked of LiveKit
    # each in an assistant turn (case-insensitive substring), in this order; others may come between
    said: list[str] | None = None
    not_said: list[str] | None = None  # in no assistant turn
    recording: dict[str, Any] | None = None  # e.g. {status: completed}: the call's recording
    analysis: dict[str, Any] | None = None  # e.g. {success: {pass: true}}: the post-call analysis


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid")

    flow: str
    dial: ScriptDial | None = None  # placed as a phone call first; without it already connected
    transfer_answer: Literal["human", "no_answer"] = "human"  # how a transfer's destination answers
    variables: dict[str, Any] = {}
    turns: list[ScriptTurn] = []
    extract: dict[str, dict[str, Any]] = {}
    # the post-call analysis's answer (scripted like extract:): {summary, success: {pass, score,
    # reason}, sentiment, fields}; what it leaves out the analysis does not report
    analysis: dict[str, Any] = {}
    # how long the extraction LLM takes to answer for a node (a gate or prompt then waits)
    extract_delay_s: dict[str, float] = {}
    device: ScriptDevice | None = None  # the caller's device and its tools (ringflow/simulation/device.py)
    jobs: dict[str, ScriptJob] = {}  # background jobs' simulated timeline (ringflow/simulation/jobs.py)
    # private addresses and networks the flow's HTTP entries may reach in this simulation,
    # and no others: a worker refuses them all unless RINGFLOW_HTTP_ALLOW_PRIVATE=1
    allow_private: list[str] = []
    expect: Expect = Expect()

    @model_validator(mode="after")
    def _supervised(self) -> Script:
        """Takeovers and hand-backs in order: one at a time, each hand-back after one, and
        the caller's turns during a takeover are what they say to the supervisor."""
        taken = False
        for i, t in enumerate(self.turns):
            if t.takeover and taken:
                raise ValueError(f"turns.{i}: the call is taken over already (a hand-back first)")
            if t.handback is not None and not taken:
                raise ValueError(f"turns.{i}: a hand-back without a takeover before it")
            if taken and t.llm and t.handback is None:
                raise ValueError(f"turns.{i}: the bot is paused during a takeover: no 'llm' replies")
            if taken and (t.silence is not None or t.dtmf is not None):
                raise ValueError(f"turns.{i}: during a takeover the caller speaks ('user') to the supervisor")
            taken = (taken or t.takeover) and t.handback is None
        return self

    @field_validator("allow_private")
    @classmethod
    def _addresses(cls, items: list[str]) -> list[str]:
        allowed_networks(items)  # raises ValueError naming the bad item
        return items


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
        hint = ""
        if first["type"] == "extra_forbidden" and first["loc"]:
            hint = did_you_mean(str(first["loc"][-1]), _keys_at(first["loc"][:-1]))
        msg = str(first["msg"]).removeprefix("Value error, ")
        raise ScriptError(f"{path}: {where + ': ' if where else ''}{msg}{hint}") from None
    return script, (path.parent / script.flow)


def kill_turn_problem(script: Script, kill_at: int | None) -> str | None:
    """Why ``--kill-agent-at N`` cannot kill during this script, or None: a turn that is not
    in the script is never reached, and a run that killed nothing must not pass as a kill test."""
    if kill_at is None or 0 <= kill_at < len(script.turns):
        return None
    n = len(script.turns)
    has = f"turns 0 to {n - 1}" if n > 1 else ("only turn 0" if n == 1 else "no turns")
    return f"--kill-agent-at {kill_at}: the script has {n} turn{'' if n == 1 else 's'} ({has})"


def _keys_at(loc: tuple[int | str, ...]) -> list[str]:
    """The keys a script allows at ``loc`` (for "did you mean"): the script's own models
    walked down, through lists and optionals, along the location."""
    model: Any = Script
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if model is not None else None
        if field is None:
            return []
        model = _model_in(field.annotation)
    return list(model.model_fields) if model is not None else []


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        if (found := _model_in(arg)) is not None:
            return found
    return None


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
        return [
            f
            for i, (e, a) in enumerate(zip(expected, actual, strict=True))
            for f in matches(e, a, f"{where}[{i}]")
        ]
    numeric = (int, float)
    if (
        isinstance(expected, numeric)
        and isinstance(actual, numeric)
        and not isinstance(expected, bool)
        and not isinstance(actual, bool)
    ):
        return [] if float(expected) == float(actual) else [f"{where}: expected {expected!r}, got {actual!r}"]
    if expected != actual or (type(expected) is bool and type(actual) is not bool):
        return [f"{where}: expected {expected!r}, got {actual!r}"]
    return []


def said_failures(
    said: list[str] | None, not_said: list[str] | None, transcript: list[dict[str, Any]]
) -> list[str]:
    """``said``: each string in an assistant turn after the previous one's match (later in
    the same turn, or in a later turn); ``not_said``: in no assistant turn. Case-insensitive."""
    spoken = [str(t.get("text") or "") for t in transcript if t.get("role") == "assistant"]
    turns = [t.lower() for t in spoken]
    failures: list[str] = []
    at, pos = 0, 0  # the cursor: turn index, and offset in that turn
    previous = None
    for i, want in enumerate(said or []):
        w = want.lower()
        found = None
        for k in range(at, len(turns)):
            j = turns[k].find(w, pos if k == at else 0)
            if j >= 0:
                found = (k, j + len(w))
                break
        if found is None:
            where = next((k for k, t in enumerate(turns) if w in t), None)
            if where is None:
                failures.append(f"said[{i}]: {want!r} is in no assistant turn")
            else:
                failures.append(
                    f"said[{i}]: {want!r} is said (assistant turn {where}) only before "
                    f"{previous!r}, which must come first"
                )
            continue
        at, pos = found
        previous = want
    for i, never in enumerate(not_said or []):
        hits = [k for k, t in enumerate(turns) if never.lower() in t]
        if hits:
            failures.append(
                f"not_said[{i}]: {never!r} is said in assistant turn {hits[0]}: {spoken[hits[0]][:120]!r}"
            )
    return failures


def check(expect: Expect, result: dict[str, Any]) -> list[str]:
    failures: list[str] = []
    for key in (
        "path",
        "state",
        "variables",
        "disposition",
        "end_reason",
        "transfer",
        "recording",
        "analysis",
    ):
        want = getattr(expect, key)
        # ``recording: null``: the script expects none (a caller who declined)
        if want is not None or (key in ("recording", "analysis") and key in expect.model_fields_set):
            failures.extend(matches(want, result.get(key), key))
    if expect.said is not None or expect.not_said is not None:
        failures.extend(said_failures(expect.said, expect.not_said, result.get("transcript") or []))
    return failures
