"""``ringflow flow validate --mcp``: the checks only a live server can answer.

Offline validation (the default) cannot know whether a declared server answers or has the
tools a flow names; with ``--mcp`` each declared server is listed as a call would list it
at its start (``activities/mcp_client.list_tools``), and every problem is an issue with
the path of what it is about.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from ringflow.activities.mcp_client import list_tools
from ringflow.activities.mcp_tools import why
from ringflow.callflow.errors import Issue
from ringflow.callflow.mcp_spec import McpServerTools
from ringflow.callflow.mcp_tools import pinned_definition, shadowed_tools
from ringflow.callflow.model import FlowDefinition, FunctionEntry


def _entries(definition: FlowDefinition) -> Iterator[tuple[str, FunctionEntry]]:
    flow = definition.flow
    for i, fn in enumerate(flow.global_functions):
        yield f"global_functions[{i}]", fn
    for nid, node in flow.nodes.items():
        for i, fn in enumerate(node.functions):
            yield f"nodes.{nid}.functions[{i}]", fn
        if node.run is not None:
            yield f"nodes.{nid}.run", node.run


async def _list(name: str, definition: FlowDefinition) -> tuple[str, McpServerTools]:
    try:
        return name, await list_tools(definition.flow.mcp_servers[name])
    except Exception as exc:
        return name, McpServerTools(error=why(exc))


async def check_servers(definition: FlowDefinition) -> list[Issue]:
    """Every declared server reachable, every named tool listed and usable."""
    servers = dict(await asyncio.gather(*(_list(n, definition) for n in definition.flow.mcp_servers)))
    issues: list[Issue] = []
    for name, listed in servers.items():
        if listed.error:
            issues.append(
                Issue(f"mcp_servers.{name}", f"MCP server '{name}' cannot be listed: {listed.error}")
            )
    for path, fn in _entries(definition):
        ref = fn.mcp
        server = servers.get(ref.server) if ref is not None else None
        if ref is None or server is None or server.error:
            continue
        have = {t.name for t in server.tools}
        wanted = ref.wanted() or []
        for i, tool in enumerate(wanted):
            where = f"{path}.mcp.tool" if ref.tool is not None else f"{path}.mcp.tools[{i}]"
            if tool in server.left_out:
                issues.append(
                    Issue(
                        where,
                        f"MCP server '{ref.server}' lists '{tool}' but it cannot be "
                        f"offered: {server.left_out[tool]}",
                    )
                )
            elif tool not in have:
                options = ", ".join(sorted(have)) or "none"
                issues.append(
                    Issue(where, f"MCP server '{ref.server}' has no tool '{tool}' (it has: {options})")
                )
    pinned = pinned_definition(definition, {n: s for n, s in servers.items() if not s.error})
    issues += [Issue(f"{path}.mcp", words) for path, words in shadowed_tools(pinned)]
    return issues
