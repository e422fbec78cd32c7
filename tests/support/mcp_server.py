"""A real MCP server for the tests: the ``mcp`` package's ``MCPServer`` (FastMCP, renamed in
mcp 2) over Streamable HTTP on loopback, in a subprocess.

``python -m tests.support.mcp_server PORT LOG`` serves ``http://127.0.0.1:PORT/mcp``. Its
``tools/list`` answers two tools a page, with a cursor, so a client that ignores paging
misses tools. Every ``tools/call`` is appended to ``LOG`` as a JSON line (tool, arguments,
the request's ``_meta``), so a test can check what reached the server and how often.
The headers of each request are logged too (``headers``), to check configured headers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ListToolsResult, PaginatedRequestParams

PAGE = 2


class PagedServer(MCPServer):
    """``tools/list`` in pages of :data:`PAGE`: the cursor is the index of the next tool."""

    async def _handle_list_tools(self, ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
        tools = await self.list_tools()
        start = int(params.cursor) if params is not None and params.cursor else 0
        end = start + PAGE
        return ListToolsResult(tools=tools[start:end], next_cursor=str(end) if end < len(tools) else None)


def build(log: Path) -> MCPServer:
    server = PagedServer("crm-test")

    def record(tool: str, args: dict[str, Any], ctx: Context) -> None:
        rc = ctx.request_context
        meta = dict(rc.meta or {})
        headers = {k.lower(): v for k, v in (ctx.headers or {}).items()}
        with log.open("a") as f:
            f.write(
                json.dumps({"tool": tool, "args": args, "meta": meta, "auth": headers.get("authorization")})
                + "\n"
            )

    @server.tool()
    async def lookup_customer(phone: str, ctx: Context) -> dict[str, Any]:
        """Find a customer by phone number."""
        record("lookup_customer", {"phone": phone}, ctx)
        if phone == "+15550100":
            return {"found": True, "name": "Dana Reyes", "tier": "gold"}
        return {"found": False}

    @server.tool()
    async def open_ticket(customer: str, summary: str, ctx: Context, priority: int = 3) -> str:
        """Open a support ticket for a customer."""
        record("open_ticket", {"customer": customer, "summary": summary, "priority": priority}, ctx)
        return f"ticket T-{len(summary)} opened for {customer}"

    @server.tool()
    async def failing_tool(ctx: Context) -> str:
        """A tool that always reports an error."""
        record("failing_tool", {}, ctx)
        raise ToolError("the CRM is read-only today")

    @server.tool()
    async def order_status(order_id: str, ctx: Context) -> dict[str, Any]:
        """The status of an order."""
        record("order_status", {"order_id": order_id}, ctx)
        return {"order_id": order_id, "status": "shipped"}

    @server.tool(name="bad-name")
    async def bad_name(ctx: Context) -> str:
        """A tool whose name no LLM accepts."""
        return "unreachable"

    return server


def main() -> None:
    """``PORT LOG`` serves Streamable HTTP; ``stdio LOG`` speaks over stdin/stdout."""
    if sys.argv[1] == "stdio":
        build(Path(sys.argv[2])).run("stdio")
        return
    port, log = int(sys.argv[1]), Path(sys.argv[2])
    build(log).run("streamable-http", host="127.0.0.1", port=port)


if __name__ == "__main__":
    main()
