"""The flow format (version 1), stated once as typed models.

The models check shape only: names, types, unknown keys. Rules that need the whole
graph (targets exist, end reachable, templates defined) live in ``validate.py`` so
that every problem can be reported at once with its path, not just the first.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ringflow.callflow.journey import FollowUp, JourneySpec
from ringflow.callflow.knowledge import KnowledgeSearch, KnowledgeSource, knowledge_flag
from ringflow.callflow.mcp_spec import McpPinned, McpRef, McpServer
from ringflow.callflow.voice import VoiceSettings

FLOW_NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,63}$"
NODE_ID_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
FUNCTION_NAME_PATTERN = r"^[a-zA-Z_][a-zA-Z0-9_]{0,63}$"

NodeType = Literal["agent", "end", "gate", "action", "subflow"]
ContextStrategy = Literal["append", "reset", "reset_with_summary"]
VarType = Literal["string", "integer", "number", "boolean", "object", "array"]
Op = Literal["==", "!=", "<", "<=", ">", ">=", "in", "not_in", "contains", "exists", "not_exists"]
HttpMethod = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
# auto: VAD and endpointing end the caller's turn; manual: push-to-talk (the client starts
# and ends it); realtime: the LLM starts while the caller is still speaking
ListenMode = Literal["auto", "manual", "realtime"]


def canonical(value: Any) -> str:
    """The string a branch-table case key and a result value are compared by.

    YAML ``true`` and Python ``True`` and the string ``"True"`` must all match, and so
    must ``1`` and ``"1"``; a float with no fraction matches the integer.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if value is None:
        return "null"
    text = str(value).strip()
    low = text.lower()
    return low if low in ("true", "false", "null") else text


class Strict(BaseModel):
    """Unknown keys are typos, so every model forbids them."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Variable(Strict):
    type: VarType = "string"
    default: Any = None
    description: str | None = None
    required: bool = False
    enum: list[Any] | None = None


class IdleSettings(Strict):
    timeout_s: float = Field(10, gt=0)
    prompts: int = Field(2, ge=0)
    goodbye: str = "Sorry, I can't hear you. Goodbye."
    # after the last prompt: hang up (end), or stop prompting and wait quietly for the caller
    # (wait: a kiosk or device session, where nobody pays for an open line)
    on_give_up: Literal["end", "wait"] = "end"


class VoicemailSettings(Strict):
    """Where a call a machine answered goes (an end node whose greeting or task is the message)."""

    node: str


class FlowSettings(Strict):
    max_duration_s: float = Field(600, gt=0)
    max_transitions: int = Field(100, ge=1)
    max_node_visits: int = Field(10, ge=1)
    idle: IdleSettings = IdleSettings()
    listen: ListenMode = "auto"
    context: ContextStrategy = "append"
    voicemail: VoicemailSettings | None = None
    # said while the call waits for an extraction a gate, prompt or function reads, when the
    # transition that led there had no ``speech`` of its own (callflow/reads.py)
    wait_speech: str = Field("One moment.", min_length=1, max_length=500)


RecordingLayout = Literal["mixed", "dual_channel"]


class RecordingConsent(Strict):
    """The announcement said before the call's first turn, so the caller hears that the call
    is recorded before anything is recorded of them."""

    say: str = Field(min_length=1, max_length=1000)


class RecordingSettings(Strict):
    """Whether and where the call's audio is recorded (LiveKit Egress, audio only).

    ``store`` names the target: ``s3://BUCKET/PREFIX/`` (any S3-compatible store: its endpoint
    and keys are the worker's ``RINGFLOW_RECORDING_S3_*`` settings, never the flow's),
    ``gs://BUCKET/PREFIX/``, ``azure://CONTAINER/PREFIX/`` or ``file:///DIR`` (a folder the
    egress writes to: development and simulation). ``layout``: ``mixed`` (both sides on one
    channel) or ``dual_channel`` (the agent on one channel, the caller on the other).
    ``record_after_consent``: a node; the recording starts only once the call enters it
    (the branch a flow that asks for consent takes on a yes), so a call that never gets
    there is never recorded."""

    enabled: bool = True
    store: str | None = Field(None, max_length=500)
    layout: RecordingLayout = "mixed"
    consent: RecordingConsent | None = None
    record_after_consent: str | None = None


class Retry(Strict):
    max_attempts: int = Field(3, ge=1, le=20)
    initial_interval_s: float = Field(1, gt=0)
    backoff: float = Field(2, ge=1)


class BranchTable(Strict):
    field: str
    cases: dict[str, str]
    default: str | None = None

    @field_validator("cases", mode="before")
    @classmethod
    def _canonical_keys(cls, cases: Any) -> Any:
        if isinstance(cases, dict):
            out = {canonical(k): v for k, v in cases.items()}
            if len(out) != len(cases):
                raise ValueError(
                    f"two case keys are the same value once compared as text "
                    f"({', '.join(repr(k) for k in cases)}): keep one"
                )
            return out
        return cases


Transition = str | BranchTable


class HttpSpec(Strict):
    method: HttpMethod = "GET"
    url: str
    headers: dict[str, str] | None = None
    body: Any = None
    timeout_s: float | None = Field(None, gt=0)

    @field_validator("method", mode="before")
    @classmethod
    def _upper(cls, v: Any) -> Any:
        return v.upper() if isinstance(v, str) else v


FunctionKind = Literal[
    "handler", "transition_only", "capture", "http", "send_dtmf", "mcp", "transfer", "jobs", "knowledge"
]


class TransferSpec(Strict):
    """Hand the caller to a person. ``cold``: a SIP REFER (LiveKit TransferSIPParticipant).
    ``warm``: the person is dialed into a consult room, told ``announce``, then moved into the
    caller's room (LiveKit MoveParticipant). Done, the call ends ``transferred``; failed (no
    answer, declined, hung up), the call goes to ``fallback`` (else the LLM is told)."""

    to: str
    mode: Literal["cold", "warm"] = "cold"
    announce: str | None = None
    fallback: str | None = None


DTMF_KEYS = r"^[0-9*#A-Da-d]+$"
SEND_DTMF_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "required": ["digits"],
    "properties": {
        "digits": {
            "type": "string",
            "pattern": r"^[0-9*#]{1,32}$",
            "description": "The keys to press, in order, e.g. '1' or '1234#'.",
        }
    },
}


class DtmfSpec(Strict):
    """Key presses an agent node collects: complete at ``max_digits``, at the ``terminator``
    (not part of the digits) or ``timeout_s`` after the last key; then ``{field: digits}`` is
    the node's result and routes like a capture function's."""

    field: str = Field("digits", pattern=FUNCTION_NAME_PATTERN)
    max_digits: int = Field(4, ge=1, le=32)
    terminator: str | None = Field("#", pattern=r"^[0-9*#]$")
    timeout_s: float = Field(5, gt=0, le=60)
    transition_to: Transition | None = None


class JobRef(Strict):
    """One job of a group: a handler of the flow's module (run with the group's arguments it
    declares plus its own ``args``), or with ``http`` a request like an HTTP entry's
    (templated with the call's values, the group's arguments and ``args``)."""

    name: str = Field(pattern=FUNCTION_NAME_PATTERN)
    args: dict[str, Any] = {}
    http: HttpSpec | None = None
    timeout_s: float | None = Field(None, gt=0, le=3600)
    retry: Retry | None = None


class JobsSpec(Strict):
    run: list[JobRef] = Field(min_length=1, max_length=16)
    timeout_s: float = Field(60, gt=0, le=3600)  # the whole group; jobs still running then: timed_out
    cancel_on_error: bool = False  # a job failing cancels the others
    cancellable: bool = True  # the LLM is offered ``cancel_jobs`` while the group runs
    cancel_on_leave: bool = False  # the flow leaving the node cancels the group
    label: str | None = Field(None, max_length=200)  # what a client shows while it runs

    @model_validator(mode="after")
    def _unique(self) -> JobsSpec:
        names = [j.name for j in self.run]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"a job runs once per group: {', '.join(twice)} is listed twice")
        return self


class FunctionEntry(Strict):
    name: str = Field(pattern=FUNCTION_NAME_PATTERN)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    transition_to: Transition | None = None
    transition_only: bool = False
    capture: bool = False
    http: HttpSpec | None = None
    mcp: McpRef | None = None
    speech: str | None = None
    timeout_s: float | None = Field(None, gt=0)
    retry: Retry | None = None
    cancel_on_interruption: bool | None = None
    send_dtmf: bool = False  # the LLM presses keys on the line (to navigate an IVR)
    transfer: TransferSpec | None = None
    jobs: JobsSpec | None = None  # a background job group (callflow/jobs.py)
    knowledge: KnowledgeSearch | None = None  # a search of the flow's knowledge base (callflow/knowledge.py)

    @field_validator("knowledge", mode="before")
    @classmethod
    def _knowledge_flag(cls, v: Any) -> Any:
        return knowledge_flag(v)

    @model_validator(mode="before")
    @classmethod
    def _mcp_group_name(cls, data: Any) -> Any:
        # ``mcp: {tools: [...]}`` offers each tool under its own name: the entry needs none.
        mcp = data.get("mcp") if isinstance(data, dict) else None
        if (
            isinstance(mcp, dict)
            and "name" not in data
            and mcp.get("tools") is not None
            and isinstance(mcp.get("server"), str)
        ):
            return {**data, "name": re.sub(r"\W", "_", f"mcp_{mcp['server']}")[:64]}
        return data

    @property
    def kind(self) -> FunctionKind:
        if self.jobs is not None:
            return "jobs"
        if self.knowledge is not None:
            return "knowledge"
        if self.transfer is not None:
            return "transfer"
        if self.mcp is not None:
            return "mcp"
        if self.send_dtmf:
            return "send_dtmf"
        if self.transition_only:
            return "transition_only"
        if self.capture:
            return "capture"
        if self.http is not None:
            return "http"
        return "handler"


class Condition(Strict):
    """A leaf (``var``/``op``/``value``) or a combination (``all``/``any``)."""

    var: str | None = None
    op: Op | None = None
    value: Any = None
    all: list[Condition] | None = None
    any: list[Condition] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> Condition:
        forms = sum(x is not None for x in (self.var, self.all, self.any))
        if forms != 1:
            raise ValueError("a condition has exactly one of 'var', 'all' or 'any'")
        if self.var is not None and self.op is None:
            raise ValueError("a condition with 'var' needs an 'op'")
        return self


class GateBranch(Strict):
    when: Condition
    to: str


class Action(Strict):
    tts_say: str | None = None
    end_conversation: str | None = None
    function: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _bare_end(cls, data: Any) -> Any:
        # ``{end_conversation: }`` (no goodbye) arrives as None: keep it meaningful.
        if (
            isinstance(data, dict)
            and "end_conversation" in data
            and data["end_conversation"] is None
            and data.get("tts_say") is None
            and data.get("function") is None
        ):
            return {**data, "end_conversation": ""}
        return data

    @model_validator(mode="after")
    def _one_kind(self) -> Action:
        if sum(x is not None for x in (self.tts_say, self.end_conversation, self.function)) != 1:
            raise ValueError("an action has exactly one of 'tts_say', 'end_conversation', 'function'")
        return self


class ExtractSpec(Strict):
    name: str = Field(pattern=FUNCTION_NAME_PATTERN)
    type: VarType = "string"
    description: str = ""
    enum: list[Any] | None = None


class AnalysisSuccess(Strict):
    """The success evaluation: pass or fail and a score (0 to 1) with the reason, against
    the flow's own rubric."""

    rubric: str = Field(min_length=1, max_length=4000)
    prompt: str | None = Field(None, max_length=4000)  # replaces the default instruction


class AnalysisPart(Strict):
    """``summary`` or ``sentiment`` with a prompt of its own (``true`` takes the default)."""

    prompt: str = Field(min_length=1, max_length=4000)


class AnalysisSettings(Strict):
    """What is worked out of the whole transcript once the call has ended (one LLM call
    with a JSON schema: ``activities/analysis.py``). ``fields`` are typed like extraction's
    (structured outputs); ``redact``: the LLM reads the transcript with personal data
    replaced (``activities/redaction.py``)."""

    summary: bool | AnalysisPart = False
    success: AnalysisSuccess | None = None
    sentiment: bool | AnalysisPart = False
    fields: list[ExtractSpec] = Field(default_factory=list, max_length=50)
    redact: bool = False


class GlobalNode(Strict):
    """A node the caller can digress into from anywhere (``global:`` on a node): offered to the
    LLM as a tool named after the node on every agent node that does not opt out
    (``global_nodes: false``), described by ``description`` (when it applies).

    ``return``: ``true`` comes back to the node the call was on (re-entered with a short
    "as I was saying" turn, not its greeting); a node id goes there instead; ``false`` (the
    default) is a plain jump. A returning node offers the LLM ``go_back`` (``RETURN_TOOL``)
    while the digression is open. ``max_uses`` caps digressions into it per call;
    ``cooldown``: after one, it is offered again only once the call has moved that many
    times (counted from its return). One of the two is required: a digression offered on
    the node it returns to is a loop, and this is its bound."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    description: str = Field(min_length=1, max_length=1000)
    return_: bool | str = Field(False, alias="return")
    max_uses: int | None = Field(None, ge=1, le=100)
    cooldown: int | None = Field(None, ge=1, le=100)

    @property
    def returns(self) -> bool:
        return self.return_ is not False


RETURN_TOOL = "go_back"  # what the LLM calls on a returning global node to end the digression


class Node(Strict):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    type: NodeType = "agent"
    task: str | None = None
    greeting: str | None = None
    respond_immediately: bool = True
    allow_interrupt: bool = True
    add_role: bool = True
    context: ContextStrategy | None = None
    extract: list[ExtractSpec] = []
    functions: list[FunctionEntry] = []
    pre_actions: list[Action] = []
    post_actions: list[Action] = []
    disposition: str | None = None
    branches: list[GateBranch] | None = None
    default: str | None = None
    run: FunctionEntry | None = None
    save_as: str | None = None
    transition_to: Transition | None = None
    dtmf: DtmfSpec | None = None
    device_tools: bool | list[str] = False
    listen: ListenMode | None = None  # overrides settings.listen on this node
    follow_up: FollowUp | None = None  # an end node: the journey's next call (callflow/journey.py)
    global_: GlobalNode | None = Field(None, alias="global")  # a digression offered everywhere
    global_nodes: bool = True  # false: the flow's global nodes are not offered on this node
    # a ``subflow`` node: the flow it runs (a file beside this one, or NAME@VERSION) and its
    # inputs (templates rendered in the calling flow's values); its end goes to transition_to
    use: str | None = Field(None, min_length=1, max_length=300)
    inputs: dict[str, Any] = {}
    voice: VoiceSettings | None = None  # over the flow's voice, key by key (callflow/voice.py)
    # automatic retrieval: each caller turn on this node searches the flow's knowledge base
    # and the passages go into the LLM's context for its answer (docs/knowledge.md)
    knowledge: KnowledgeSearch | None = None

    @field_validator("knowledge", mode="before")
    @classmethod
    def _knowledge_flag(cls, v: Any) -> Any:
        return knowledge_flag(v)


class Flow(Strict):
    flow: str = Field(pattern=FLOW_NAME_PATTERN)
    version: int = Field(1, ge=1)
    description: str | None = None
    role: str | None = None
    variables: dict[str, Variable] = {}
    handlers: str | None = None
    settings: FlowSettings = FlowSettings()
    recording: RecordingSettings | None = None
    analysis: AnalysisSettings | None = None
    global_functions: list[FunctionEntry] = []
    mcp_servers: dict[str, McpServer] = {}
    knowledge: list[KnowledgeSource] = Field([], max_length=200)  # `ringflow kb ingest` reads these
    start: str | None = None
    journey: JourneySpec | None = None  # calls of one person joined in a journey
    voice: VoiceSettings | None = None  # the speech stack and turn taking (callflow/voice.py)
    nodes: dict[str, Node] = Field(min_length=1)

    @property
    def start_node(self) -> str:
        return self.start or next(iter(self.nodes))


class HandlerSpec(Strict):
    """What the engine needs of a handler, derived once from its signature and docstring.

    Carried inside a :class:`FlowDefinition` so that a workflow or an agent can run the
    engine without importing user code.
    """

    description: str
    parameters: dict[str, Any]
    timeout_s: float | None = None
    cancel_on_interruption: bool | None = None


class SubflowSpec(Strict):
    """What the engine needs to run a ``subflow`` node, fixed when the flow was loaded: the
    used flow's nodes are inlined into the definition under ``<node>.`` (``callflow/subflow_use.py``),
    so a call never reads a file or a store to enter one, and a published version holds
    them. ``digest`` names the used flow's content (its version id when used as
    NAME@VERSION): the same use of other content is another definition, another version."""

    use: str  # the reference as written
    flow: str  # the used flow's name
    digest: str
    start: str  # the inlined id of its start node
    variables: dict[str, Variable] = {}  # its inputs, with their types and defaults
    # its ``handlers`` module, found beside its file; its specs are in the definition's
    # ``handlers`` under ``<node>.<name>`` (callflow/subflow_handlers.py)
    handlers: str | None = None


class FlowDefinition(Strict):
    """A validated flow plus its handler specs: the pinned input of a call."""

    flow: Flow
    handlers: dict[str, HandlerSpec] = {}
    subflows: dict[str, SubflowSpec] = {}  # by the id of the ``subflow`` node that uses each
    source: str | None = None
    # MCP servers' tools, listed when the call started (callflow/mcp_spec.py); None: not yet
    mcp: McpPinned | None = None
