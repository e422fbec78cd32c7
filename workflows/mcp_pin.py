"""Pinning a call's MCP tools when it starts: one ``tools/list`` per server the flow uses, run
as activities, fixed into the call's definition for the rest of the call.

The engine, the agent's snapshot and every later run (continue-as-new carries the pinned
definition) then offer exactly these tools; a replay reads the activities' results from the
history and never asks a server again. A server that cannot be listed, or lacks a named
tool, is a note in the call's rejected list and the call goes on without those tools.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from ringflow.activities.mcp_tools import McpListRequest
    from ringflow.callflow.engine import Engine
    from ringflow.callflow.mcp_spec import McpServerTools, used_servers
    from ringflow.callflow.mcp_tools import missing_tools, pinned_definition
    from ringflow.contract.call import CallInput
    from ringflow.workflows import activity_calls as acts


def needs_pin(inp: CallInput) -> bool:
    """A call whose flow uses MCP servers and whose tools are not pinned yet (a first run)."""
    return inp.definition.mcp is None and bool(used_servers(inp.definition.flow))


async def pin_tools(wf: Any) -> None:
    """List the servers, then swap the call's definition and engine for the pinned ones. The
    state is kept: entering the start node computed nothing that depends on MCP tools (an
    action node cannot run one)."""
    definition = wf.inp.definition
    names = used_servers(definition.flow)
    listed = await asyncio.gather(
        *(
            # the server itself (its headers hold credentials) is read by the activity, not sent
            acts.list_mcp_tools(
                McpListRequest(call_id=wf.inp.call_id, server_name=name), definition.flow.mcp_servers[name]
            )
            for name in names
        )
    )
    pinned = pinned_definition(definition, dict(zip(names, listed, strict=True)))
    try:
        engine = Engine(pinned)
    except Exception as exc:  # tools the activity let through but the engine cannot use
        why = f"the servers' tools cannot be used: {type(exc).__name__}: {str(exc)[:200]}"
        pinned = pinned_definition(definition, {n: McpServerTools(error=why) for n in names})
        engine = Engine(pinned)
    wf.inp = wf.inp.model_copy(update={"definition": pinned})
    wf.engine = engine
    for note in missing_tools(pinned):
        wf.record_rejected(None, note)
