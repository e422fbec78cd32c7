"""Tools the caller's device offers (a web, app or embedded client in the room), called over
LiveKit participant RPC in the shape of MCP.

The device advertises its tools in a participant attribute (:data:`TOOLS_ATTRIBUTE`, JSON:
``{"tools": [...]}`` as MCP's ``tools/list`` result, or the bare list) or, without one,
answers an RPC ``tools/list``. A node with ``device_tools: true`` (or a list of names) offers
them to the LLM next to the flow's functions; a flow function of the same name, an MCP
server's tool included, wins: the device's is the fallback, offered only when the flow has
none of that name on the node (its server could not be listed, say). A call is an RPC
``tools/call`` with ``{"name", "arguments", "_meta": {"ringflow/idempotency-key"}}``; the
answer is MCP's ``CallToolResult`` (``content``, ``structuredContent``, ``isError``).

The device is in the room, so only the agent can reach it: it records each call and its
answer in the workflow (update ``record_device_tool``), once per event id like a function's,
and the workflow keeps it as a ``tool`` turn of the transcript.
Everything LiveKit-specific is behind :class:`DeviceLink` (``agents/livekit_device.py``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, Protocol

import jsonschema

from ringflow.agents.hot_path import SessionPort, ToolOutcome
from ringflow.agents.outbox import Outbox
from ringflow.callflow.compiled import closed
from ringflow.callflow.effects import SetNode, ToolSpec
from ringflow.callflow.engine import Engine
from ringflow.callflow.mcp_spec import MAX_ERROR_CHARS, UNAVAILABLE, McpTool
from ringflow.callflow.mcp_tools import usable_tool
from ringflow.callflow.schema import drop_nulls, to_strict
from ringflow.callflow.state import CallState
from ringflow.contract.updates import CallFunctionResult, DeviceToolRecord
from ringflow.workflows.client import CallHandle

log = logging.getLogger(__name__)
TOOLS_ATTRIBUTE = "ringflow.tools"
MAX_DEVICE_TOOLS = 32
MAX_PAYLOAD_CHARS = 15_000  # LiveKit RPC payloads are limited to 15 KiB
RPC_TIMEOUT_S = 8.0
IDEMPOTENCY_META_KEY = "ringflow/idempotency-key"


class DeviceLink(Protocol):
    """The caller's device as the agent reaches it: its identity, attributes and RPC."""

    identity: str

    def attributes(self) -> dict[str, str]: ...

    async def rpc(self, method: str, payload: str, timeout_s: float) -> str: ...


def parse_tools(payload: Any) -> tuple[list[McpTool], dict[str, str]]:
    """Tools a device advertised, those an LLM can be offered, and the others with why."""
    try:
        data = json.loads(payload) if isinstance(payload, str) else payload
    except ValueError:
        return [], {"*": "the advertisement is not JSON"}
    items = data.get("tools") if isinstance(data, dict) else data
    if not isinstance(items, list):
        return [], {"*": "the advertisement has no tool list"}
    tools: list[McpTool] = []
    left_out: dict[str, str] = {}
    for item in items:
        if not isinstance(item, dict):
            continue
        schema = item.get("inputSchema", item.get("input_schema", {"type": "object", "properties": {}}))
        tool, why = usable_tool(item.get("name"), item.get("description"), schema)
        if tool is None:
            left_out[str(item.get("name"))[:64]] = why
        elif len(tools) >= MAX_DEVICE_TOOLS:
            left_out[tool.name] = f"more than {MAX_DEVICE_TOOLS} tools"
        elif all(t.name != tool.name for t in tools):
            tools.append(tool)
    return tools, left_out


class DeviceTools:
    """One device's tools, as the agent offers and calls them."""

    def __init__(self, link: DeviceLink, tools: list[McpTool]) -> None:
        self.link = link
        self.tools = {t.name: t for t in tools}
        self._validators: dict[str, Any] = {}

    @classmethod
    async def discover(cls, link: DeviceLink) -> DeviceTools | None:
        """The device's tools from its attribute, else from an RPC ``tools/list``; None when it
        offers none (or does not answer)."""
        advertised = link.attributes().get(TOOLS_ATTRIBUTE)
        if advertised is None:
            try:
                advertised = await link.rpc("tools/list", "{}", RPC_TIMEOUT_S)
            except Exception as exc:  # a device that does not speak the RPC offers nothing
                log.info("device offers no tools (%s)", type(exc).__name__, extra={"event": "device_tools"})
                return None
        tools, left_out = parse_tools(advertised)
        if left_out:
            log.info("device tools left out: %s", ", ".join(left_out)[:300], extra={"event": "device_tools"})
        return cls(link, tools) if tools else None

    def offered(self, setting: bool | list[str], taken: set[str]) -> list[McpTool]:
        """The tools a node with ``device_tools: setting`` offers besides ``taken`` names."""
        if setting is False:
            return []
        names = list(self.tools) if setting is True else [n for n in setting if n in self.tools]
        return [self.tools[n] for n in names if n not in taken]

    def spec(self, tool: McpTool) -> ToolSpec:
        strict = to_strict(tool.input_schema)
        return ToolSpec(
            name=tool.name,
            description=tool.description.replace("{{", "{ {"),
            parameters=strict if strict is not None else tool.input_schema,
            strict=strict is not None,
        )

    async def call(self, name: str, args: dict[str, Any], key: str) -> ToolOutcome:
        """Run a device tool; its arguments are checked against its schema first, as the
        workflow checks a flow function's. Every outcome is an answer for the LLM."""
        tool = self.tools[name]
        cleaned = drop_nulls(args, tool.input_schema) if args else args
        validator = self._validators.get(name)
        if validator is None:
            validator = self._validators[name] = jsonschema.Draft202012Validator(closed(tool.input_schema))
        try:
            errors = sorted(validator.iter_errors(cleaned), key=lambda e: list(e.path))
        except Exception as exc:  # a schema that checks but cannot be applied (an unresolvable $ref)
            return _error(f"the device's schema for '{name}' cannot be applied ({type(exc).__name__})")
        if errors:
            where = ".".join(str(p) for p in errors[0].path)
            return _error(f"invalid argument{' ' + where if where else ''}: {errors[0].message}")
        payload = json.dumps({"name": name, "arguments": cleaned, "_meta": {IDEMPOTENCY_META_KEY: key}})
        if len(payload) > MAX_PAYLOAD_CHARS:
            return _error(f"the arguments of '{name}' are too large for the device")
        try:
            raw = await self.link.rpc("tools/call", payload, RPC_TIMEOUT_S)
            answer = json.loads(raw)
        except Exception as exc:
            return _error(f"the device did not answer '{name}' ({type(exc).__name__})")
        return _outcome(answer)


def _error(message: str) -> ToolOutcome:
    return ToolOutcome({"status": "error", "error": message}, run_llm=True, error=True)


def _outcome(answer: Any) -> ToolOutcome:
    if not isinstance(answer, dict):
        return _error("the device answered something that is not a tool result")
    texts = [
        c.get("text", "")
        for c in answer.get("content") or []
        if isinstance(c, dict) and c.get("type") == "text"
    ]
    if answer.get("isError"):
        return _error(" ".join(texts)[:MAX_ERROR_CHARS] or "the device reported an error")
    structured = answer.get("structuredContent")
    result = structured if structured is not None else {"content": "\n".join(texts)}
    return ToolOutcome(result, run_llm=True)


def with_device_tools(eff: SetNode, device: DeviceTools | None, setting: bool | list[str]) -> SetNode:
    """A node's tools plus the device tools it offers (never displacing a flow function)."""
    if device is None or setting is False:
        return eff
    extra = device.offered(setting, {t.name for t in eff.tools})
    if not extra:
        return eff
    return eff.model_copy(update={"tools": [*eff.tools, *(device.spec(t) for t in extra)]})


# --- the controller's side (kept here so agents/controller.py only calls in) -----------------
class DeviceUser(Protocol):
    """What the functions below use of the controller (``agents/controller.FlowController``,
    which calls into this module: a Protocol, so the import runs one way)."""

    call: CallHandle
    engine: Engine
    state: CallState
    seq: int
    turn_key: str
    step_no: int
    clock: Callable[[], float]
    outbox: Outbox
    port: SessionPort | None
    device: DeviceTools | None
    epoch: int | None  # this attach's epoch, sent with every update

    def refused(self, exc: BaseException) -> bool: ...
    def on_turn(
        self,
        role: str,
        text: str,
        *,
        interrupted: bool = False,
        started_at: float | None = None,
        ended_at: float | None = None,
    ) -> None: ...


def offer(controller: DeviceUser, eff: SetNode) -> SetNode:
    """``eff`` with the device tools its node offers, for the port to show the LLM."""
    cnode = controller.engine.flow.nodes.get(eff.node)
    setting = cnode.node.device_tools if cnode is not None else False
    return with_device_tools(eff, controller.device, setting)


def serves(controller: DeviceUser, node: str | None, name: str) -> bool:
    """Whether the LLM's call of ``name`` on ``node`` is one of the device's tools."""
    device: DeviceTools | None = controller.device
    if device is None or node is None or name not in device.tools:
        return False
    cnode = controller.engine.flow.nodes.get(node)
    if cnode is None or name in cnode.functions:
        return False  # the flow's function (an MCP server's tool too) wins
    return any(t.name == name for t in device.offered(cnode.node.device_tools, set(cnode.functions)))


def falls_back(controller: DeviceUser, node: str | None, name: str, out: ToolOutcome) -> bool:
    """Whether a flow function's failed run should go to the device instead: an MCP server
    tool whose server could not be reached, on a node that offers the device's tool of that
    name (the device's tool is the fallback of the server's)."""
    device: DeviceTools | None = controller.device
    if device is None or node is None or not out.error or name not in device.tools:
        return False
    error = out.result.get("error") if isinstance(out.result, dict) else None
    if not isinstance(error, str) or not error.startswith(UNAVAILABLE):
        return False
    cnode = controller.engine.flow.nodes.get(node)
    setting = cnode.node.device_tools if cnode is not None else False
    return setting is True or (isinstance(setting, list) and name in setting)


async def call_device_tool(controller: DeviceUser, name: str, args: dict[str, Any]) -> ToolOutcome:
    """Call the device and record the call and its answer in the workflow, as a function's
    (``workflows/device_record.py``): a turn replayed by a resumed agent is answered from
    that record, and the device is not asked again. Recording is awaited: the answer
    reaches the LLM once it is durable (if the workflow cannot be reached, it goes as a
    transcript turn through the outbox, as before)."""
    eid = f"{controller.turn_key}:{controller.step_no}:dev:{name}"
    handle = controller.call.handle
    try:
        known = await handle.query("function_answer", eid)
    except Exception:  # the worker is away: ask the device (its idempotency key dedupes)
        known = None
    if known is not None:
        return ToolOutcome(known.get("result"), run_llm=True, error=bool(known.get("error")))
    device = controller.device
    if device is None:  # it left the room since ``serves`` chose it
        return ToolOutcome({"status": "error", "error": f"the device offering '{name}' has left"}, True, True)
    key = f"{controller.call.call_id}:{controller.turn_key}:{controller.step_no}"
    out = await device.call(name, args, key)
    record = DeviceToolRecord(
        event_id=eid,
        node=controller.state.node or "",
        name=name,
        args=args,
        result=out.result,
        error=out.error,
        at=controller.clock(),
        after_seq=controller.seq,
        epoch=controller.epoch,
    )
    controller.outbox.kick()  # the update waits for every seq before it
    try:
        await handle.execute_update("record_device_tool", record, result_type=CallFunctionResult)
    except Exception as exc:
        if controller.refused(exc):
            return out
        log.warning("device tool call not recorded in the workflow (%s)", type(exc).__name__)
        entry: dict[str, Any] = {"device_tool": name, "args": args}
        entry["error" if out.error else "result"] = out.result
        controller.on_turn("tool", json.dumps(entry, ensure_ascii=False, default=str))
    return out


async def use_device(controller: DeviceUser, device: DeviceTools | None) -> None:
    """The caller's device (re)advertised its tools: offer them on the current node now."""
    controller.device = device
    port = controller.port
    snap = controller.engine.snapshot(controller.state)
    if snap is not None and port is not None and hasattr(port, "update_tools"):
        await port.update_tools(offer(controller, snap).tools)
