"""Talking to a flow's MCP servers with the ``mcp`` package: list tools (every page), call one.

Used by the workflow's activities (``activities/mcp_tools.py``) and by ``ringflow flow
validate --mcp``. A server is Streamable HTTP (``url``, the flow's ``headers`` on every
request) or, for local development, a command spoken to over stdio. Each operation opens
its own session: a call's tool calls are few and may run on different workers, and a
session held open across them would be state no retry or replay could rebuild.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

import httpx2
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import RequestParamsMeta, TextContent

from ringflow.callflow.mcp_spec import (
    MAX_ERROR_CHARS,
    MAX_SERVER_CHARS,
    MAX_TOOLS_PER_SERVER,
    McpServer,
    McpServerTools,
    McpTool,
)
from ringflow.callflow.mcp_tools import usable_tool

MAX_PAGES = 50  # a server whose cursor never ends cannot hold a call's start hostage
IDEMPOTENCY_META_KEY: Final = "ringflow/idempotency-key"


@asynccontextmanager
async def connect(server: McpServer) -> AsyncIterator[Client]:
    """A ready session with ``server``; every read is bounded by its ``timeout_s``."""
    if server.url is not None:
        http = httpx2.AsyncClient(headers=server.headers or {}, timeout=httpx2.Timeout(server.timeout_s))
        async with (
            http,
            Client(
                streamable_http_client(server.url, http_client=http), read_timeout_seconds=server.timeout_s
            ) as client,
        ):
            yield client
        return
    assert server.command is not None
    params = StdioServerParameters(command=server.command[0], args=server.command[1:], env=server.env)
    async with Client(params, read_timeout_seconds=server.timeout_s) as client:
        yield client


async def list_tools(server: McpServer) -> McpServerTools:
    """Every tool the server lists, following ``nextCursor``; tools no LLM could be offered
    (a bad name, an unusable schema) and any beyond :data:`MAX_TOOLS_PER_SERVER` are left
    out, each named in ``left_out``. Connection problems raise (the caller may retry)."""
    tools: list[McpTool] = []
    skipped: dict[str, str] = {}
    total = 0
    async with connect(server) as client:
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            for t in page.tools:
                tool, why = _usable(t)
                if tool is None:
                    skipped[t.name[:100]] = why
                elif len(tools) >= MAX_TOOLS_PER_SERVER:
                    skipped[t.name] = f"more than {MAX_TOOLS_PER_SERVER} tools"
                elif (size := len(tool.model_dump_json())) + total > MAX_SERVER_CHARS:
                    skipped[t.name] = f"the server's tools pass {MAX_SERVER_CHARS} characters"
                else:
                    total += size
                    tools.append(tool)
            cursor = page.next_cursor
            if not cursor:
                break
        else:
            skipped["..."] = f"pages after the first {MAX_PAGES} were not read"
    return McpServerTools(tools=tools, left_out=dict(list(skipped.items())[:20]))


def _usable(t: Any) -> tuple[McpTool | None, str]:
    return usable_tool(t.name, t.description or t.title, dict(t.input_schema or {}), llm_name=False)


async def call_tool(
    server: McpServer,
    tool: str,
    args: dict[str, Any],
    idempotency_key: str,
) -> tuple[Any, str | None]:
    """(result for the LLM, error text or None). A tool's own error (``isError``) is an
    answer, not a failure: it comes back as the error text; transport problems raise."""
    async with connect(server) as client:
        # RequestParamsMeta is an open map (PEP 728 extra_items), which mypy does not model yet.
        meta: RequestParamsMeta = {IDEMPOTENCY_META_KEY: idempotency_key}  # type: ignore[typeddict-unknown-key]
        res = await client.call_tool(tool, args, meta=meta)
    texts = [c.text for c in res.content if isinstance(c, TextContent)]
    others = [c.type for c in res.content if getattr(c, "type", None) != "text"]
    if res.is_error:
        return None, " ".join(texts)[:MAX_ERROR_CHARS] or "the tool reported an error"
    if res.structured_content is not None:
        return res.structured_content, None
    out: dict[str, Any] = {"content": "\n".join(texts)}
    if others:
        out["omitted"] = others  # images, audio, resources: not for a voice LLM
    return out, None
