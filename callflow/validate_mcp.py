"""Validation rules for MCP servers, ``mcp`` entries and ``device_tools`` (offline: no server
is contacted here; ``ringflow flow validate --mcp`` does that, see ``activities/mcp_client``)."""

from __future__ import annotations

import re

from ringflow.callflow.errors import did_you_mean
from ringflow.callflow.mcp_spec import all_entries
from ringflow.callflow.model import FUNCTION_NAME_PATTERN, Flow, FunctionEntry
from ringflow.callflow.validate_checker import Checker

SERVER_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_FUNCTION_NAME = re.compile(FUNCTION_NAME_PATTERN)
_BAD_HEADER = re.compile(r"[\r\n\x00]")


def check_mcp_entry(checker: Checker, path: str, fn: FunctionEntry) -> None:
    """An ``mcp`` entry: a declared server, its schema from the server, names fit for the LLM."""
    ref = fn.mcp
    assert ref is not None
    servers = list(checker.flow.mcp_servers)
    if ref.server not in checker.flow.mcp_servers:
        hint = did_you_mean(ref.server, servers) if servers else ""
        checker.err(
            f"{path}.mcp.server", f"unknown MCP server '{ref.server}'{hint}: declare it under mcp_servers"
        )
    if fn.parameters is not None:
        checker.err(
            f"{path}.parameters",
            "an mcp entry takes its parameters from the server's tools/list: remove them here",
        )
    if ref.tools is not None and fn.description is not None:
        checker.err(
            f"{path}.description",
            "with 'tools', each tool keeps the server's description: "
            "remove it here (or offer one tool with 'tool')",
        )
    names = [ref.tool] if ref.tool is not None else (ref.tools if isinstance(ref.tools, list) else [])
    key = "tool" if ref.tool is not None else "tools"
    for i, name in enumerate(names):
        where = f"{path}.mcp.{key}" + ("" if key == "tool" else f"[{i}]")
        if not name:
            checker.err(where, "an MCP tool name cannot be empty")
        elif key == "tools" and not _FUNCTION_NAME.match(name):
            checker.err(
                where,
                f"'{name}' cannot be offered to the LLM under its own name (letters, digits "
                "and '_' only, at most 64): offer it with its own entry, "
                f"'mcp: {{server: {ref.server}, tool: {name}}}' and a 'name'",
            )
        elif names.index(name) != i:
            checker.err(where, f"'{name}' is listed twice")


def check_mcp_flow(checker: Checker, flow: Flow) -> None:
    """Declared servers (names, transport, headers, use) and nodes' ``device_tools``."""
    used = {fn.mcp.server for fn in all_entries(flow) if fn.mcp is not None}
    for name, server in flow.mcp_servers.items():
        path = f"mcp_servers.{name}"
        if not SERVER_NAME.match(name):
            checker.err(
                path,
                f"MCP server name '{name}' must be lower-case letters, digits and '_', "
                "starting with a letter, at most 32 characters",
            )
        for header, value in (server.headers or {}).items():
            if _BAD_HEADER.search(header) or _BAD_HEADER.search(value):
                checker.err(
                    f"{path}.headers.{header}", "a header name or value cannot hold a line break or NUL"
                )
        if server.command is not None:
            checker.warn(
                f"{path}.command",
                "a stdio MCP server runs a local command on the worker: for "
                "local development only; deploy servers with a 'url'",
            )
        if name not in used:
            checker.warn(path, f"MCP server '{name}' is declared but no function entry uses it")
    for nid, node in flow.nodes.items():
        if "device_tools" not in node.model_fields_set:
            continue
        path = f"nodes.{nid}.device_tools"
        if node.type not in ("agent", "end"):
            checker.err(path, f"'device_tools' does not apply to a {node.type} node: no LLM runs there")
        if isinstance(node.device_tools, list):
            for i, name in enumerate(node.device_tools):
                if not _FUNCTION_NAME.match(name):
                    checker.err(
                        f"{path}[{i}]",
                        f"'{name}' is not a valid tool name (letters, digits and "
                        "'_' only, at most 64 characters)",
                    )
