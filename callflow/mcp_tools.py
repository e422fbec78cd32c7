"""From a flow's ``mcp`` entries and the tools pinned at call start to plain function entries.

Each tool an ``mcp`` entry offers becomes an ordinary :class:`FunctionEntry` whose
description and parameters are the server's, so the engine checks its arguments and routes
its result like any other function's; only running it differs (an MCP ``tools/call``).
Kept apart from ``compiled.py`` so the compiler only asks "which entries does this stand for".
"""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema

from ringflow.callflow.mcp_spec import (
    MAX_SCHEMA_CHARS,
    McpPinned,
    McpRef,
    McpServerTools,
    McpTool,
    all_entries,
)
from ringflow.callflow.model import FUNCTION_NAME_PATTERN, FlowDefinition, FunctionEntry

_NAME = re.compile(FUNCTION_NAME_PATTERN)


def expand(fn: FunctionEntry, definition: FlowDefinition) -> list[FunctionEntry]:
    """The function entries an ``mcp`` entry stands for on this call; none before the tools
    are pinned, for a server that could not be listed, or for a tool the server lacks."""
    ref = fn.mcp
    pinned = definition.mcp
    if ref is None or pinned is None:
        return []
    listed = pinned.servers.get(ref.server)
    server = definition.flow.mcp_servers.get(ref.server)
    if listed is None or server is None:
        return []
    timeout = fn.timeout_s or server.timeout_s
    by_name = {t.name: t for t in listed.tools}
    if ref.tool is not None:
        tool = by_name.get(ref.tool)
        if tool is None:
            return []
        return [_entry(fn, fn.name, fn.description or _literal(tool.description), tool, timeout)]
    wanted = ref.wanted()
    names = [t.name for t in listed.tools] if wanted is None else [n for n in wanted if n in by_name]
    return [
        _entry(fn, name, _literal(by_name[name].description), by_name[name], timeout)
        for name in names
        if _NAME.match(name)
    ]


def _literal(text: str) -> str:
    """A server's description as plain text: descriptions are templates in the flow, and the
    server's must neither fail to compile nor pull the call's values into the prompt."""
    return text.replace("{{", "{ {").replace("}}", "} }")


def _entry(fn: FunctionEntry, name: str, description: str, tool: McpTool, timeout: float) -> FunctionEntry:
    assert fn.mcp is not None
    # model_copy keeps the author's other keys (transition_to, speech, retry...) as given.
    return fn.model_copy(
        update={
            "name": name,
            "description": description,
            "parameters": tool.input_schema,
            "timeout_s": timeout,
            "mcp": McpRef(server=fn.mcp.server, tool=tool.name),
        }
    )


def missing_tools(definition: FlowDefinition) -> list[str]:
    """What a pinned call cannot offer, in words: servers that could not be listed and named
    tools they lack. The workflow records each as a note; the call goes on without them."""
    pinned = definition.mcp
    if pinned is None:
        return []
    out: list[str] = []
    for name, listed in pinned.servers.items():
        if listed.error:
            out.append(f"MCP server '{name}' could not be listed: {listed.error}; its tools are not offered")
        if listed.left_out:
            items = ", ".join(f"'{tool}' ({why})" for tool, why in listed.left_out.items())
            out.append(f"MCP server '{name}': tools not offered: {items}")
    for fn in all_entries(definition.flow):
        ref = fn.mcp
        if ref is None:
            continue
        server = pinned.servers.get(ref.server)
        if server is None or server.error:
            continue
        have = {t.name for t in server.tools}
        if ref.tools == "all":
            odd = [t for t in sorted(have) if not _NAME.match(t)]
            if odd:
                out.append(
                    f"MCP server '{ref.server}': {', '.join(repr(t) for t in odd)} not offered "
                    f"(function '{fn.name}'): not valid function names; offer one with "
                    "'tool:' and a 'name'"
                )
        for tool in ref.wanted() or []:
            if tool not in have:
                out.append(
                    f"MCP server '{ref.server}' has no tool '{tool}' (function '{fn.name}'): not offered"
                )
    out += [words for _, words in shadowed_tools(definition)]
    return out


def shadowed_tools(definition: FlowDefinition) -> list[tuple[str, str]]:
    """Pinned server tools named like one of the flow's own functions, as (path, words):
    the flow's function is kept and the tool is not offered (``compiled.py``), which the
    workflow notes at pinning and ``flow validate --mcp`` reports."""
    flow = definition.flow
    own_globals = {f.name for f in flow.global_functions if f.mcp is None}
    out: list[tuple[str, str]] = []

    def check(path: str, fn: FunctionEntry, own: set[str]) -> None:
        for entry in expand(fn, definition):
            if entry.name in own:
                tool = entry.mcp.tool if entry.mcp is not None else entry.name
                out.append(
                    (
                        path,
                        f"MCP server '{fn.mcp.server if fn.mcp else ''}' tool '{tool}' (function "
                        f"'{fn.name}') is named like the flow's own function '{entry.name}': the "
                        "flow's function is kept and the tool is not offered; give it another "
                        "'name' with 'tool:'",
                    )
                )

    for i, fn in enumerate(flow.global_functions):
        if fn.mcp is not None:
            check(f"global_functions[{i}]", fn, own_globals)
    for nid, node in flow.nodes.items():
        own = {f.name for f in node.functions if f.mcp is None}
        if node.type == "agent":
            own |= own_globals
        for i, fn in enumerate(node.functions):
            if fn.mcp is not None:
                check(f"nodes.{nid}.functions[{i}]", fn, own)
    return out


def pinned_definition(definition: FlowDefinition, servers: dict[str, McpServerTools]) -> FlowDefinition:
    """The call's definition with the servers' tools fixed into it."""
    return definition.model_copy(update={"mcp": McpPinned(servers=servers)})


MAX_DESCRIPTION_CHARS = 4_000


def usable_tool(
    name: Any, description: Any, schema: Any, llm_name: bool = True
) -> tuple[McpTool | None, str]:
    """A listed tool as one the LLM can be offered, or (None, why not): a server's and a
    device's tools pass the same gate before a call offers them. A server's tool may have
    a name the LLM would refuse (``llm_name=False``): an entry can offer it under another."""
    if not isinstance(name, str) or not name or len(name) > 128:
        return None, "not a valid tool name"
    if llm_name and not _NAME.match(name):
        return None, "not a valid function name"
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return None, "its input schema is not an object"
    if len(json.dumps(schema, default=str)) > MAX_SCHEMA_CHARS:
        return None, f"its input schema is larger than {MAX_SCHEMA_CHARS} characters"
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return None, f"invalid input schema: {exc.message[:200]}"
    text = description if isinstance(description, str) and description else name
    return McpTool(name=name, description=text[:MAX_DESCRIPTION_CHARS], input_schema=schema), ""
