"""What a scripted LLM lane plays and records: replies, extraction answers, faults.

Split from ``scripted_llm.py`` (the HTTP server) so the scripting rules read on their own:
which request consumes which scripted reply, and what an extraction request gets.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Literal

from ringflow.contract.supervision import SUPERVISOR_MARK

DRY_REPLY = "Okay."

Kind = Literal["chat", "schema"]


# --- scripted replies -------------------------------------------------------------------
@dataclass(frozen=True)
class ScriptedCall:
    name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class ScriptedResponse:
    """One chat completion: optional text and zero or more tool calls."""

    say: str | None = None
    calls: tuple[ScriptedCall, ...] = ()


def check_steps(steps: Any, where: str = "reply") -> list[dict[str, Any]]:
    """Validate a reply's steps, so a typo in a script fails loudly at load time rather
    than as a puzzling conversation later."""
    if not isinstance(steps, list):
        raise ValueError(f"{where}: expected a list of steps, got {type(steps).__name__}")
    out: list[dict[str, Any]] = []
    for i, step in enumerate(steps):
        at = f"{where}[{i}]"
        if not isinstance(step, dict):
            raise ValueError(f"{at}: a step is a mapping with 'call' or 'say'")
        if ("call" in step) == ("say" in step):
            raise ValueError(f"{at}: a step has exactly one of 'call' or 'say'")
        if "say" in step:
            if set(step) != {"say"} or not isinstance(step["say"], str):
                raise ValueError(f"{at}: a 'say' step is {{say: text}}")
            out.append({"say": step["say"]})
            continue
        unknown = set(step) - {"call", "args"}
        if unknown:
            raise ValueError(f"{at}: unknown keys {sorted(unknown)}")
        args = step.get("args") or {}
        if not isinstance(step["call"], str) or not step["call"] or not isinstance(args, dict):
            raise ValueError(f"{at}: a 'call' step is {{call: name, args: {{...}}}}")
        out.append({"call": step["call"], "args": args})
    return out


def split_reply(steps: list[dict[str, Any]]) -> list[ScriptedResponse]:
    """Cut a reply into the completions OpenAI would send: a ``say`` after a call starts a
    new completion (the model speaks again once the tool results are back)."""
    out: list[ScriptedResponse] = []
    says: list[str] = []
    calls: list[ScriptedCall] = []
    for step in steps:
        if "say" in step:
            if calls:
                out.append(ScriptedResponse(" ".join(says) or None, tuple(calls)))
                says, calls = [], []
            says.append(step["say"])
        else:
            calls.append(ScriptedCall(step["call"], dict(step["args"])))
    if says or calls or not out:
        out.append(ScriptedResponse(" ".join(says) if says else ("" if not calls else None), tuple(calls)))
    return out


# --- records ----------------------------------------------------------------------------
@dataclass
class RecordedRequest:
    """A request as the endpoint saw it; ``response`` is the ``chat.completion`` answer (the
    assembled equivalent for streamed answers) or the error body, None while pending."""

    lane: str
    kind: Kind
    body: dict[str, Any]
    stream: bool
    status: int | None = None
    response: dict[str, Any] | None = None
    dry: bool = False
    note: str | None = None

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages") or [])

    @property
    def tools(self) -> list[dict[str, Any]]:
        return list(self.body.get("tools") or [])

    @property
    def tool_names(self) -> list[str]:
        return [str((t.get("function") or {}).get("name")) for t in self.tools]

    @property
    def schema_name(self) -> str | None:
        js = _json_schema(self.body)
        return None if js is None else js.get("name")

    @property
    def answered(self) -> bool:
        return self.status is not None

    @property
    def text(self) -> str:
        """All message contents joined: what a test greps for transcript lines."""
        parts: list[str] = []
        for m in self.messages:
            content = m.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts += [str(p.get("text", "")) for p in content if isinstance(p, dict)]
        return "\n".join(parts)


def _json_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    rf = body.get("response_format")
    if isinstance(rf, dict) and rf.get("type") == "json_schema":
        js = rf.get("json_schema")
        return js if isinstance(js, dict) else {}
    return None


# --- lanes ------------------------------------------------------------------------------
class Lane:
    """One script: replies, extraction answers, faults and the requests it received."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.replies: deque[list[ScriptedResponse]] = deque()
        self.followups: deque[ScriptedResponse] = deque()
        self.extract: dict[str, dict[str, Any]] = {}
        self.extract_delay: dict[str, float] = {}  # by node: the extraction LLM's latency, seconds
        self.chat_delay = 0.0  # the chat model's latency, seconds (a script turn's llm_delay_s)
        self.requests: list[RecordedRequest] = []
        self.dry_count = 0
        self.extract_gate: asyncio.Event | None = None
        self.chat_gate: asyncio.Event | None = None
        self._failures: deque[int] = deque()
        self._bad_json = 0
        self._changed = asyncio.Event()

    def __repr__(self) -> str:
        return f"Lane({self.name!r}, replies={len(self.replies)}, requests={len(self.requests)})"

    # scripting
    def queue_reply(self, steps: list[dict[str, Any]]) -> None:
        self.replies.append(split_reply(check_steps(steps)))

    def replace_replies(self, replies: list[list[dict[str, Any]]]) -> None:
        """Drop whatever is queued and queue these: a simulator replaying a turn after a crash."""
        self.replies.clear()
        self.followups.clear()
        for steps in replies:
            self.queue_reply(steps)

    def set_extract(self, node_or_schema: str, values: dict[str, Any]) -> None:
        if not isinstance(values, dict):
            raise ValueError(f"extract '{node_or_schema}': values are a mapping")
        self.extract[node_or_schema] = dict(values)

    def fail_next(self, n: int = 1, status: int = 500) -> None:
        if not 400 <= status <= 599:
            raise ValueError("a failure status is 4xx or 5xx")
        self._failures.extend([status] * n)

    def bad_json_next(self, n: int = 1) -> None:
        self._bad_json += n

    def load_script(self, script: dict[str, Any]) -> Lane:
        """Queue a conversation script's ``llm:`` replies (in turn order) and its
        ``extract:`` answers. Turns without ``llm`` queue nothing: a simulator that needs
        replies pinned to turns queues each turn's reply as it plays the turn instead."""
        turns = script.get("turns") or []
        if not isinstance(turns, list):
            raise ValueError("script: 'turns' is a list")
        for i, turn in enumerate(turns):
            if not isinstance(turn, dict):
                raise ValueError(f"script: turns[{i}] is a mapping (user/silence/llm)")
            if turn.get("llm") is not None:
                self.queue_reply(check_steps(turn["llm"], f"turns[{i}].llm"))
        extract = script.get("extract") or {}
        if not isinstance(extract, dict):
            raise ValueError("script: 'extract' maps node names to values")
        for node, values in extract.items():
            self.set_extract(str(node), values or {})
        return self

    # state
    @property
    def ran_dry(self) -> bool:
        return self.dry_count > 0

    @property
    def pending_replies(self) -> int:
        return len(self.replies) + len(self.followups)

    def of_kind(self, kind: Kind | None) -> list[RecordedRequest]:
        return [r for r in self.requests if kind is None or r.kind == kind]

    async def wait_requests(
        self, count: int = 1, kind: Kind | None = None, answered: bool = False, timeout: float = 10.0
    ) -> list[RecordedRequest]:
        """Wait until ``count`` requests (of ``kind``; answered ones if asked) have arrived.
        Tests synchronise on this instead of sleeping."""

        def ready() -> list[RecordedRequest] | None:
            got = [r for r in self.of_kind(kind) if r.answered or not answered]
            return got if len(got) >= count else None

        deadline = time.monotonic() + timeout
        while (got := ready()) is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"lane {self.name!r}: {len(self.of_kind(kind))} {kind or 'any'} "
                    f"request(s) after {timeout:g} s, wanted {count}"
                )
            event = self._changed
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except TimeoutError:
                continue
        return got

    async def followups_taken(self, timeout: float) -> bool:
        """Wait until the agent has asked for the rest of the reply being played (the steps
        after a function call: its answer to the call's result), False after ``timeout``."""
        deadline = time.monotonic() + timeout
        while self.followups:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            event = self._changed  # set after each request is answered
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except TimeoutError:
                return False
        return True

    # serving (the server calls these)
    def _notify(self) -> None:
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    def _record(self, rec: RecordedRequest) -> None:
        self.requests.append(rec)
        self._notify()

    def _take_failure(self) -> int | None:
        return self._failures.popleft() if self._failures else None

    def _take_bad_json(self) -> bool:
        if self._bad_json > 0:
            self._bad_json -= 1
            return True
        return False

    def _next_chat(self, offers_tools: bool, after_user: bool = True) -> tuple[ScriptedResponse, str | None]:
        """The completion for a chat request and a note when it is not a scripted one.

        A script's replies answer what the caller said. A turn the bot takes on its own
        (speaking first on entering a node, an idle re-prompt) does not consume one: it
        gets a short filler, so the next reply still answers the next user turn.
        """
        if self.followups:
            return self.followups.popleft(), None
        if not after_user:
            return ScriptedResponse(DRY_REPLY), "bot-initiated turn: filler, no reply consumed"
        if self.replies:
            head = self.replies[0]
            if offers_tools or not any(r.calls for r in head):
                self.replies.popleft()
                self.followups.extend(head[1:])
                return head[0], None
            return ScriptedResponse(DRY_REPLY), "no tools offered: the next reply calls functions, kept"
        self.dry_count += 1
        return ScriptedResponse(DRY_REPLY), "dry"

    def _extraction_delay(self, schema_name: str | None) -> float:
        return next(
            (s for key, s in self.extract_delay.items() if schema_name in (key, f"extract_{key}"[:64])), 0.0
        )

    def _extraction(self, schema_name: str | None) -> dict[str, Any] | None:
        if schema_name is None:
            return None
        if schema_name in self.extract:
            return self.extract[schema_name]
        for key, values in self.extract.items():  # by node: the activity names schemas extract_<node>
            if f"extract_{key}"[:64] == schema_name:
                return values
        return None


def _after_user(messages: list[dict[str, Any]]) -> bool:
    """Whether the request answers the caller: its last non-system message is the user's,
    or a supervisor's line (the bot's first turn after a hand-back: the script's reply)."""
    for m in reversed(messages):
        role = m.get("role")
        if role in ("system", "developer"):
            continue
        content = m.get("content")
        if role == "assistant" and isinstance(content, str) and content.startswith(SUPERVISOR_MARK):
            return True
        return role == "user"
    return True  # nothing but instructions: a bare request, treat it as a turn


def schema_answer(js: dict[str, Any], values: dict[str, Any] | None) -> dict[str, Any]:
    """Mapped values plus a null for each schema property they lack; structured values go
    out as JSON text where the schema asks for text."""
    raw_schema = js.get("schema")
    schema: dict[str, Any] = raw_schema if isinstance(raw_schema, dict) else {}
    raw_props = schema.get("properties")
    props: dict[str, Any] = raw_props if isinstance(raw_props, dict) else {}
    out: dict[str, Any] = dict.fromkeys(props)
    for key, value in (values or {}).items():
        types = (props.get(key) or {}).get("type")
        allowed = set(types) if isinstance(types, list) else {types}
        if isinstance(value, dict | list) and "string" in allowed and not allowed & {"object", "array"}:
            value = json.dumps(value)
        out[key] = value
    return out
