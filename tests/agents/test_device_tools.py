"""Device tools: tools the caller's device offers, called over LiveKit participant RPC.

There is no LiveKit server here, so the device is faked at the agent's port boundary
(``DeviceLink``: its attributes and its RPC), speaking the MCP shapes a real device would;
everything else is real: the CallWorkflow on the dev server, the agent code in
livekit-agents text mode (LLM scripted), and the MCP server of ``tests/support/mcp_server.py`` for
the server tool that shares a name with a device tool.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from temporalio.client import Client

from ringflow.agents.device_tools import (
    IDEMPOTENCY_META_KEY,
    TOOLS_ATTRIBUTE,
    DeviceTools,
    parse_tools,
    use_device,
)
from ringflow.callflow.loader import validate_data
from ringflow.callflow.model import FlowDefinition
from ringflow.simulation.scripted_llm import ScriptedLLM
from tests.support.agentkit import call, say, text_call
from tests.support.mcpkit import Server, serving, unused_port

pytestmark = pytest.mark.timeout(60)

DEVICE_TOOLS = [
    {
        "name": "show_map",
        "description": "Show a map of the store on the kiosk screen.",
        "inputSchema": {
            "type": "object",
            "properties": {"aisle": {"type": "integer"}},
            "required": ["aisle"],
        },
    },
    {
        "name": "lookup_customer",
        "description": "The kiosk's own customer lookup.",
        "inputSchema": {"type": "object", "properties": {"phone": {"type": "string"}}, "required": ["phone"]},
    },
    {"name": "bad name", "description": "Not offerable.", "inputSchema": {"type": "object"}},
]


class FakeDevice:
    """A kiosk in the room, as the agent reaches it: attributes and MCP-shaped RPC answers."""

    identity = "kiosk-1"

    def __init__(self, advertise_in_attribute: bool = True) -> None:
        self.attrs = {TOOLS_ATTRIBUTE: json.dumps({"tools": DEVICE_TOOLS})} if advertise_in_attribute else {}
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def attributes(self) -> dict[str, str]:
        return self.attrs

    async def rpc(self, method: str, payload: str, timeout_s: float) -> str:
        body = json.loads(payload)
        self.calls.append((method, body))
        if method == "tools/list":
            return json.dumps({"tools": DEVICE_TOOLS})
        if body["name"] == "show_map":
            return json.dumps(
                {
                    "content": [{"type": "text", "text": "shown"}],
                    "structuredContent": {"shown": True, "aisle": body["arguments"]["aisle"]},
                }
            )
        return json.dumps({"content": [{"type": "text", "text": "kiosk lookup: Dana"}]})


def kiosk_flow(url: str, device_tools: Any = True, **lookup: Any) -> FlowDefinition:
    report = validate_data(
        {
            "flow": "kiosk",
            "mcp_servers": {"crm": {"url": url, "timeout_s": 2}},
            "nodes": {
                "start": {
                    "task": "Help the shopper.",
                    "device_tools": device_tools,
                    "functions": [
                        {
                            "name": "lookup_customer",
                            "mcp": {"server": "crm", "tool": "lookup_customer"},
                            **lookup,
                        },
                        {
                            "name": "done",
                            "description": "Done.",
                            "transition_only": True,
                            "transition_to": "bye",
                        },
                    ],
                },
                "bye": {"type": "end", "task": "Say goodbye."},
            },
        }
    )
    assert report.definition is not None, report.errors
    return report.definition


def tool_turns(transcript: list[Any]) -> list[dict[str, Any]]:
    return [json.loads(t.text) for t in transcript if t.role == "tool"]


async def test_device_tools_are_offered_called_over_rpc_and_recorded(
    temporal_client: Client,
    task_queue: str,
    scripted_llm: ScriptedLLM,
    worker: None,
    mcp_server: Server,
) -> None:
    """The device's tools join the node's once it advertises them; a call goes to the device
    over RPC with an idempotency key and its result reaches the LLM and the workflow's
    transcript. A name the flow already has (an MCP server's tool) stays the server's."""
    device = FakeDevice()
    definition = kiosk_flow(mcp_server.url)
    async with text_call(temporal_client, task_queue, scripted_llm, definition=definition) as tc:
        await use_device(tc.controller, await DeviceTools.discover(device))

        before = len(tc.chats())  # the node's first turn was before the device advertised
        tc.reply(call("show_map", aisle=7), say("The map is on the screen."))
        result = await tc.user("Where are the batteries?")
        req = tc.chats()[before]
        assert req.tool_names == ["done", "lookup_customer", "show_map"]  # 'bad name' left out
        tools = {t["function"]["name"]: t["function"] for t in req.tools}
        assert tools["lookup_customer"]["description"] == "Find a customer by phone number."  # the server's

        result.expect.next_event().is_function_call(name="show_map", arguments={"aisle": 7})
        out = result.expect.next_event().is_function_call_output(is_error=False)
        assert json.loads(out.event().item.output) == {"shown": True, "aisle": 7}
        method, body = device.calls[-1]
        assert method == "tools/call" and body["name"] == "show_map" and body["arguments"] == {"aisle": 7}
        assert body["_meta"][IDEMPOTENCY_META_KEY].startswith(tc.call.call_id + ":")

        tc.reply(call("lookup_customer", phone="+15550100"), say("Welcome back, Dana."))
        looked = await tc.user("My number is 555 0100.")
        looked.expect.next_event().is_function_call(name="lookup_customer")
        found = json.loads(looked.expect.next_event().is_function_call_output().event().item.output)
        assert found["name"] == "Dana Reyes"  # from the MCP server, not the kiosk
        assert [c for c in device.calls if c[1].get("name") == "lookup_customer"] == []

        tc.reply(call("show_map", aisle="seven"), say("Which aisle?"))
        bad = await tc.user("Show me aisle seven.")
        bad.expect.next_event().is_function_call(name="show_map")
        bad.expect.next_event().is_function_call_output(is_error=True)
        assert len([c for c in device.calls if c[0] == "tools/call"]) == 1  # refused before the RPC

        await tc.synced()
        recorded = tool_turns(await tc.call.transcript())
        assert recorded[0] == {
            "device_tool": "show_map",
            "args": {"aisle": 7},
            "result": {"shown": True, "aisle": 7},
        }
        assert recorded[1]["device_tool"] == "show_map" and "error" in recorded[1]


async def test_the_device_tool_is_the_fallback_when_the_server_has_none(
    temporal_client: Client, task_queue: str, scripted_llm: ScriptedLLM, worker: None
) -> None:
    """The MCP server cannot be listed: its lookup_customer is not offered, so the device's of
    that name is, and a call goes to the device (found through an RPC tools/list, as the
    device sets no attribute)."""
    device = FakeDevice(advertise_in_attribute=False)
    definition = kiosk_flow(f"http://127.0.0.1:{unused_port()}/mcp")
    async with text_call(temporal_client, task_queue, scripted_llm, definition=definition) as tc:
        await use_device(tc.controller, await DeviceTools.discover(device))
        assert device.calls[0][0] == "tools/list"
        before = len(tc.chats())
        tc.reply(call("lookup_customer", phone="+15550100"), say("Hello Dana."))
        result = await tc.user("It's 555 0100.")
        req = tc.chats()[before]
        tools = {t["function"]["name"]: t["function"] for t in req.tools}
        assert tools["lookup_customer"]["description"] == "The kiosk's own customer lookup."
        result.expect.next_event().is_function_call(name="lookup_customer")
        out = json.loads(result.expect.next_event().is_function_call_output().event().item.output)
        assert out == {"content": "kiosk lookup: Dana"}
        assert device.calls[-1][1]["name"] == "lookup_customer"


async def test_a_node_offers_only_the_device_tools_it_names(
    temporal_client: Client,
    task_queue: str,
    scripted_llm: ScriptedLLM,
    worker: None,
    mcp_server: Server,
) -> None:
    definition = kiosk_flow(mcp_server.url, device_tools=["lookup_customer"])
    async with text_call(temporal_client, task_queue, scripted_llm, definition=definition) as tc:
        device = FakeDevice()
        await use_device(tc.controller, await DeviceTools.discover(device))
        before = len(tc.chats())
        tc.reply(call("show_map", aisle=1), say("I can't do that."))
        result = await tc.user("Show me the map.")
        assert tc.chats()[before].tool_names == ["done", "lookup_customer"]
        out = result.expect.next_event().is_function_call_output(is_error=True)  # livekit refuses it
        assert "Unknown function: show_map" in out.event().item.output
        assert [c for c in device.calls if c[0] == "tools/call"] == []


def test_parse_tools_keeps_what_an_llm_can_be_offered() -> None:
    tools, left_out = parse_tools(json.dumps(DEVICE_TOOLS))
    assert [t.name for t in tools] == ["show_map", "lookup_customer"]
    assert left_out == {"bad name": "not a valid function name"}
    assert parse_tools("not json") == ([], {"*": "the advertisement is not JSON"})
    assert parse_tools({"tools": "x"})[0] == []


def test_device_tools_validation() -> None:
    flow = {
        "flow": "k",
        "nodes": {
            "s": {
                "task": "t",
                "device_tools": ["ok_name", "bad name"],
                "functions": [
                    {"name": "done", "description": "d", "transition_only": True, "transition_to": "g"}
                ],
            },
            "g": {
                "type": "gate",
                "device_tools": True,
                "branches": [{"when": {"var": "x", "op": "exists"}, "to": "e"}],
                "default": "e",
            },
            "e": {"type": "end", "task": "bye"},
        },
        "variables": {"x": {}},
    }
    errors = [f"{e.path}: {e.message}" for e in validate_data(flow).errors]
    assert any(e.startswith("nodes.s.device_tools[1]: 'bad name' is not a valid tool name") for e in errors)
    assert any(e.startswith("nodes.g.device_tools: 'device_tools' does not apply to a gate") for e in errors)


async def test_the_device_takes_over_a_server_tool_whose_server_goes_down(
    temporal_client: Client, task_queue: str, scripted_llm: ScriptedLLM, worker: None, tmp_path: Path
) -> None:
    """Pinned from a live server, lookup_customer is the server's; the server then dies, and
    the call that cannot reach it (after its retries) is answered by the device's tool."""
    device = FakeDevice()
    with serving(tmp_path / "calls.jsonl") as server:
        definition = kiosk_flow(server.url, retry={"max_attempts": 1})
        async with text_call(temporal_client, task_queue, scripted_llm, definition=definition) as tc:
            await use_device(tc.controller, await DeviceTools.discover(device))
            before = len(tc.chats())
            server.stop()  # pinned already: the call still offers its tools
            tc.reply(call("lookup_customer", phone="+15550100"), say("Hello Dana."))
            result = await tc.user("It's 555 0100.")
            tools = {t["function"]["name"]: t["function"] for t in tc.chats()[before].tools}
            assert tools["lookup_customer"]["description"] == "Find a customer by phone number."  # server's
            result.expect.next_event().is_function_call(name="lookup_customer")
            out = json.loads(result.expect.next_event().is_function_call_output().event().item.output)
            assert out == {"content": "kiosk lookup: Dana"}
            await tc.synced()
            recorded = tool_turns(await tc.call.transcript())
            assert recorded[-1]["device_tool"] == "lookup_customer"


_scalar = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
_json = st.recursive(
    _scalar,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=30,
)
_schema = st.fixed_dictionaries(
    {"type": st.just("object")},
    optional={"properties": _json, "required": _json, "additionalProperties": _json, "$ref": _json},
)
_tool = st.fixed_dictionaries(
    {}, optional={"name": _json | st.text(max_size=70), "description": _json, "inputSchema": _json | _schema}
)


@settings(max_examples=300, deadline=None)
@given(payload=st.lists(_tool, max_size=6) | _json)
def test_any_advertisement_parses_without_raising(payload: Any) -> None:
    """A device's advertisement is untrusted input: whatever it holds, parsing keeps only
    tools an LLM can be offered and never raises."""
    for form in (payload, json.dumps(payload), {"tools": payload}):
        tools, left_out = parse_tools(form)
        assert all(t.input_schema.get("type") == "object" for t in tools)
        assert isinstance(left_out, dict)


async def test_a_device_schema_that_cannot_be_applied_is_an_error_for_the_llm() -> None:
    ref = {"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}, "required": ["x"]}
    device = DeviceTools(FakeDevice(), parse_tools([{"name": "odd", "inputSchema": ref}])[0])
    out = await device.call("odd", {"x": 1}, "k")
    assert out.error and "cannot be applied" in out.result["error"]
