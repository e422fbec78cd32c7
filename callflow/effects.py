"""What the engine tells its caller to do: plain data, applied in list order.

The agent applies them on the hot path (prompt, tools, speech) and the workflow
applies the durable ones (run a function, extract, end). Order is execution order: a
turn effect completes before the next effect, so ``post_actions`` and an end node's
``EndCall`` simply follow the node's first turn in the list.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from ringflow.callflow.end_reasons import EndReason
from ringflow.callflow.knowledge import KnowledgeSearch
from ringflow.callflow.model import ContextStrategy, ExtractSpec, HttpSpec, ListenMode, Retry, TransferSpec


class _Effect(BaseModel):
    model_config = ConfigDict(frozen=True)


class ToolSpec(BaseModel):
    """A tool as offered to the LLM (provider-neutral; maps 1:1 onto OpenAI's)."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    parameters: dict[str, Any]
    strict: bool = True

    def openai(self) -> dict[str, Any]:
        fn: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
        }
        if self.strict:
            fn["strict"] = True
        return {"type": "function", "function": fn}


class SetNode(_Effect):
    type: Literal["set_node"] = "set_node"
    node: str
    prompt: str
    tools: list[ToolSpec]
    context: ContextStrategy = "append"
    allow_interrupt: bool = True
    greeting: str | None = None  # spoken by a following Say; listed here for the chat context
    listen: ListenMode = "auto"  # how the caller's turns end on this node (settings.listen, per node)


class Say(_Effect):
    type: Literal["say"] = "say"
    text: str
    allow_interrupt: bool = True
    add_to_context: bool = True


class LLMTurn(_Effect):
    """Let the LLM speak now (respond_immediately, an end node's turn, an idle re-prompt)."""

    type: Literal["llm_turn"] = "llm_turn"
    reason: Literal["enter", "idle", "result", "return", "handback"] = "enter"
    instructions: str | None = None


class RunFunction(_Effect):
    type: Literal["run_function"] = "run_function"
    run_id: int
    node: str
    name: str
    kind: Literal["handler", "http", "mcp", "transfer", "knowledge"]
    args: dict[str, Any] = {}
    timeout_s: float = 10
    retry: Retry | None = None
    http: HttpSpec | None = None  # rendered with the call's values and the arguments
    # the call values the HTTP entry's templates name: the ``http_tool`` activity renders the
    # request itself from these, so the rendered one never enters the history
    http_values: dict[str, Any] | None = None
    transfer: TransferSpec | None = None  # ``to`` and ``announce`` rendered with the call's values
    action: bool = False
    cancel_on_interruption: bool = False
    mcp_server: str | None = None  # an MCP tool: the declared server and the tool's name there
    mcp_tool: str | None = None
    knowledge: KnowledgeSearch | None = None  # a knowledge search: its bounds (callflow/knowledge.py)
    # a handler's: whose handlers module runs it, a used flow's subflow node or "" the flow's
    # (callflow/subflow_handlers.py)
    scope: str = ""


class JobRun(BaseModel):
    """One job of a group as the workflow runs it (a handler of the flow's module)."""

    model_config = ConfigDict(frozen=True)

    name: str
    args: dict[str, Any] = {}
    timeout_s: float = 30
    retry: Retry | None = None
    http: bool = False  # an HTTP job: the ``http_tool`` activity renders it from the definition
    method: str = "GET"
    http_values: dict[str, Any] | None = None  # the call values its templates name


class StartJobs(_Effect):
    """Start a background job group (a ``jobs:`` entry): the LLM has its answer already."""

    type: Literal["start_jobs"] = "start_jobs"
    group_id: str
    node: str
    name: str
    jobs: list[JobRun]
    timeout_s: float = 60
    cancel_on_error: bool = False
    cancellable: bool = True
    cancel_on_leave: bool = False
    cancel_on_interruption: bool = False
    label: str | None = None
    scope: str = ""  # whose handlers module runs its jobs (as ``RunFunction.scope``)


class ToolResponse(_Effect):
    """The answer to give the LLM for a tool call; ``run_llm`` false keeps the bot silent."""

    type: Literal["tool_response"] = "tool_response"
    name: str
    result: Any = None
    run_llm: bool = True
    error: bool = False


class Extract(_Effect):
    type: Literal["extract"] = "extract"
    node: str
    fields: list[ExtractSpec]
    id: str = ""  # ``<node>#<visit>``: the entry in ``CallState.extracting`` its result clears


class EndCall(_Effect):
    type: Literal["end_call"] = "end_call"
    reason: EndReason
    disposition: str | None = None
    goodbye: str | None = None


class Rejected(_Effect):
    """An event, or the part of one, the engine could not apply; that part changed nothing."""

    type: Literal["rejected"] = "rejected"
    reason: str


Effect = Annotated[
    SetNode | Say | LLMTurn | RunFunction | ToolResponse | Extract | EndCall | Rejected | StartJobs,
    Field(discriminator="type"),
]
EFFECTS_ADAPTER: TypeAdapter[list[Effect]] = TypeAdapter(list[Effect])
