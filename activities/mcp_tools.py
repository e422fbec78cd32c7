"""The MCP activities: list a server's tools when a call starts, call one when the LLM does.

Outcome policy, as for HTTP tools: a tool's own error (``isError``) is an answer for the
LLM, returned, never retried; a server that cannot be reached or answers garbage raises a
retryable ``ApplicationError`` and the workflow's retry policy decides. Each call carries
``_meta["ringflow/idempotency-key"] = <call_id>:<run>``, the same on every retry, so a
server that honours it performs a retried call once.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field
from temporalio import activity
from temporalio.exceptions import ApplicationError

from ringflow.activities.call_definition import call_definition
from ringflow.activities.mcp_client import call_tool, list_tools
from ringflow.activities.metrics import timed
from ringflow.callflow.mcp_spec import McpServer, McpServerTools
from ringflow.contract.wire import encoded_bytes

MCP_UNAVAILABLE = "McpUnavailable"
MAX_RESULT_BYTES = 64_000


class McpListRequest(BaseModel):
    """``server`` is None from a call's workflow: the activity reads the server's declaration
    (its ``headers`` hold credentials; this input is history) from the call's definition.
    Inputs recorded before that carry it, and are served as they are."""

    call_id: str = Field(min_length=1)
    server_name: str
    server: McpServer | None = None


class McpCallRequest(BaseModel):
    call_id: str = Field(min_length=1)
    seq: int = Field(ge=0)
    server_name: str
    server: McpServer | None = None  # as in McpListRequest
    tool: str
    args: dict[str, Any] = {}


class McpCallResult(BaseModel):
    result: Any = None
    error: str | None = None


def why(exc: BaseException) -> str:
    """One line about a failure, digging through anyio's exception groups to the cause."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


async def declared(name: str, given: McpServer | None) -> McpServer:
    """The server to talk to: as given (older inputs), else as the call's flow declares it."""
    if given is not None:
        return given
    server = (await call_definition()).flow.mcp_servers.get(name)
    if server is None:
        raise ApplicationError(
            f"MCP server '{name}' is not declared in the call's flow",
            type=MCP_UNAVAILABLE,
            non_retryable=True,
        )
    return server


@activity.defn(name="mcp_list_tools")
async def mcp_list_tools(req: McpListRequest) -> McpServerTools:
    server = await declared(req.server_name, req.server)
    try:
        return await list_tools(server)
    except Exception as exc:
        raise ApplicationError(
            f"MCP server '{req.server_name}' could not be listed: {why(exc)}", type=MCP_UNAVAILABLE
        ) from None


@activity.defn(name="mcp_call_tool")
async def mcp_call_tool(req: McpCallRequest) -> McpCallResult:
    server = await declared(req.server_name, req.server)
    with timed("function", "mcp") as outcome:
        try:
            result, error = await call_tool(server, req.tool, req.args, f"{req.call_id}:{req.seq}")
        except Exception as exc:
            raise ApplicationError(
                f"MCP tool '{req.tool}' on '{req.server_name}': {why(exc)}", type=MCP_UNAVAILABLE
            ) from None
        outcome["ok"] = error is None
    if result is not None and encoded_bytes(result) > MAX_RESULT_BYTES:
        return McpCallResult(error=f"MCP tool '{req.tool}' returned more than {MAX_RESULT_BYTES} bytes")
    return McpCallResult(result=result, error=error)
