"""MCP tools in the flow format: the declared servers, the function entries that offer their
tools, and the tool list pinned when a call starts.

A flow names an MCP server's tools but does not hold their descriptions or schemas: those
come from the server's ``tools/list``. The workflow fetches them once, when the call starts,
and pins them into the call's definition (:class:`McpPinned`), so the agent and every
replay see exactly the tools the call started with, and a replay never asks the server
again. Until then (``flow validate``, a definition that was never pinned) an ``mcp`` entry
offers no tool.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_TOOLS_PER_SERVER = 128  # what a call pins of one server; the rest are reported, not offered
MAX_SCHEMA_CHARS = 16_000  # one tool's input schema, as JSON
# All of one server's pinned tools, as JSON: they ride in the call's input, its continue-as-new
# and every agent's snapshot, which Temporal limits to a few MB.
MAX_SERVER_CHARS = 120_000
MAX_ERROR_CHARS = 2_000  # the text of a tool's error result (a server's or a device's) the LLM gets
# How a tool call's error starts when its server could not be reached (after retries): the
# agent then calls the caller's device's tool of that name, if it has one.
UNAVAILABLE = "MCP server unavailable"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class McpServer(_Strict):
    """``mcp_servers.<name>``: a Streamable HTTP endpoint (``url``), or a local command spoken
    to over stdio (``command``), which is for local development only."""

    url: str | None = None
    headers: dict[str, str] | None = None
    timeout_s: float = Field(10, gt=0, le=300)
    command: list[str] | None = Field(None, min_length=1)
    env: dict[str, str] | None = None

    @model_validator(mode="after")
    def _one_transport(self) -> McpServer:
        if (self.url is None) == (self.command is None):
            raise ValueError("an MCP server has exactly one of 'url' (Streamable HTTP) or 'command' (stdio)")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"'url' must be an http:// or https:// address (got {self.url!r})")
        if self.command is not None and self.headers:
            raise ValueError("'headers' apply only to a server with a 'url'")
        if self.url is not None and self.env:
            raise ValueError("'env' applies only to a server with a 'command'")
        return self


class McpRef(_Strict):
    """A function entry's ``mcp:``: one tool of a server (offered under the entry's name), some
    of its tools or ``all`` of them (each offered under its own name)."""

    server: str
    tool: str | None = None
    tools: list[str] | Literal["all"] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> McpRef:
        if (self.tool is None) == (self.tools is None):
            raise ValueError("'mcp' has exactly one of 'tool' (one tool) or 'tools' (a list, or 'all')")
        if isinstance(self.tools, list) and not self.tools:
            raise ValueError("'tools' lists at least one tool (or is 'all')")
        return self

    def wanted(self) -> list[str] | None:
        """The server tool names this entry offers; None for all of them."""
        if self.tool is not None:
            return [self.tool]
        return None if self.tools == "all" else list(self.tools or [])


class McpTool(_Strict):
    """One tool as the server listed it when the call started."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = {"type": "object", "properties": {}}


class McpServerTools(_Strict):
    """What one server's ``tools/list`` gave when the call started; ``error`` if it could not
    be listed (none of its tools is then offered on this call)."""

    tools: list[McpTool] = []
    left_out: dict[str, str] = {}  # listed tools no LLM could be offered: name -> why
    error: str | None = None


class McpPinned(_Strict):
    """Every declared server's tools, fixed for the whole call (and its continue-as-new runs)."""

    servers: dict[str, McpServerTools] = {}


def used_servers(flow: Any) -> list[str]:
    """Declared servers an ``mcp`` entry of the flow uses, in declaration order: the ones a call
    must list at its start."""
    used = {fn.mcp.server for fn in all_entries(flow) if fn.mcp is not None}
    return [name for name in flow.mcp_servers if name in used]


def all_entries(flow: Any) -> list[Any]:
    """Every function entry of a flow: globals, node functions and action nodes' ``run``."""
    out = list(flow.global_functions)
    for node in flow.nodes.values():
        out.extend(node.functions)
        if node.run is not None:
            out.append(node.run)
    return out
