"""MCP tools against a real MCP server on loopback (``tests/support/mcp_server.py``, the ``mcp``
package's own server over Streamable HTTP, in a subprocess).

The whole-call tests run a real ``CallWorkflow`` (worker in this process, dev server) and
the production agent code in livekit-agents text mode, its LLM the scripted endpoint; only
the LLM is scripted. What is checked: the tools the LLM is offered (description and schema
from the server's ``tools/list``, pinned at call start), what reached the server (arguments,
the idempotency key in ``_meta``, the flow's headers) and what the LLM got back.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import Client
from temporalio.worker import Replayer

from ringflow.activities.mcp_client import IDEMPOTENCY_META_KEY, list_tools
from ringflow.callflow.loader import validate_data, validate_file
from ringflow.callflow.mcp_spec import McpServer
from ringflow.callflow.model import FlowDefinition
from ringflow.simulation.scripted_llm import ScriptedLLM
from ringflow.workflows.call import CallWorkflow
from tests.support.agentkit import call, say, text_call
from tests.support.mcpkit import Server, unused_port
from tests.support.paths import ROOT
from tests.support.wfkit import wait_until

pytestmark = pytest.mark.timeout(60)

TOKEN = "Bearer test-token"


def crm_flow(url: str) -> FlowDefinition:
    data = {
        "flow": "crm-desk",
        "role": "You are Ava at the help desk.",
        "mcp_servers": {"crm": {"url": url, "headers": {"Authorization": TOKEN}, "timeout_s": 5}},
        "nodes": {
            "start": {
                "task": "Identify the caller and help them.",
                "greeting": "Hello, this is Ava.",
                "functions": [
                    {
                        "name": "find_customer",
                        "description": "Look the caller up by phone number.",
                        "mcp": {"server": "crm", "tool": "lookup_customer"},
                    },
                    {"mcp": {"server": "crm", "tools": ["open_ticket", "failing_tool"]}},
                    {"name": "not_there", "mcp": {"server": "crm", "tool": "no_such_tool"}},
                    {
                        "name": "done",
                        "description": "The caller is helped.",
                        "transition_only": True,
                        "transition_to": "bye",
                    },
                ],
            },
            "bye": {"type": "end", "task": "Say goodbye."},
        },
    }
    report = validate_data(data)
    assert report.definition is not None, report.errors
    return report.definition


def output_of(ev: Any) -> Any:
    return json.loads(ev.event().item.output)


# --- a whole call ---------------------------------------------------------------------------
async def test_llm_calls_an_mcp_tool_and_gets_its_result(
    temporal_client: Client, task_queue: str, scripted_llm: ScriptedLLM, worker: None, mcp_server: Server
) -> None:
    """The server's tools are listed (every page) when the call starts and offered with the
    server's schemas; the LLM's call runs as an activity against the server, with the call's
    idempotency key in ``_meta`` and the flow's headers, and the result reaches the LLM."""
    definition = crm_flow(mcp_server.url)
    async with text_call(temporal_client, task_queue, scripted_llm, definition=definition) as tc:
        tc.reply(call("find_customer", phone="+15550100"), say("Hello Dana, how can I help?"))
        result = await tc.user("Hi, my number is 555 0100.")

        first = await tc.request(0)
        assert first.tool_names == ["done", "find_customer", "open_ticket", "failing_tool"]
        tools = {t["function"]["name"]: t["function"] for t in first.tools}
        assert tools["find_customer"]["description"] == "Look the caller up by phone number."  # the flow's
        assert tools["open_ticket"]["description"] == "Open a support ticket for a customer."  # the server's
        assert set(tools["open_ticket"]["parameters"]["properties"]) == {"customer", "summary", "priority"}
        assert tools["find_customer"]["parameters"]["required"] == ["phone"]

        result.expect.next_event().is_function_call(name="find_customer", arguments={"phone": "+15550100"})
        out = result.expect.next_event().is_function_call_output(is_error=False)
        assert output_of(out) == {"found": True, "name": "Dana Reyes", "tier": "gold"}
        answer = (await tc.request(1)).messages
        tool_msg = next(m for m in answer if m.get("role") == "tool")
        assert json.loads(tool_msg["content"])["name"] == "Dana Reyes"  # what the LLM read

        seen = [
            c
            for c in mcp_server.calls()
            if c["tool"] == "lookup_customer"
            and c["meta"].get(IDEMPOTENCY_META_KEY, "").startswith(tc.call.call_id + ":")
        ]
        assert len(seen) == 1, mcp_server.calls()
        assert seen[0]["args"] == {"phone": "+15550100"} and seen[0]["auth"] == TOKEN

        st = await tc.synced()
        notes = [r.reason for r in st.rejected]
        assert any("no tool 'no_such_tool'" in n for n in notes), notes


async def test_bad_arguments_never_reach_the_server_and_tool_errors_reach_the_llm(
    temporal_client: Client, task_queue: str, scripted_llm: ScriptedLLM, worker: None, mcp_server: Server
) -> None:
    """Arguments are checked against the pinned schema before anything runs; a tool's own
    error (``isError``) is an answer for the LLM, not a failed call, and is not retried."""
    definition = crm_flow(mcp_server.url)
    async with text_call(temporal_client, task_queue, scripted_llm, definition=definition) as tc:
        tc.reply(call("open_ticket", customer="Dana"), say("Sorry, what is the problem?"))
        bad = await tc.user("Open a ticket for me.")
        bad.expect.next_event().is_function_call(name="open_ticket")
        err = output_of(bad.expect.next_event().is_function_call_output(is_error=True))
        assert "summary" in err["error"]

        tc.reply(call("failing_tool"), say("That did not work."))
        failed = await tc.user("Try the other thing.")
        failed.expect.next_event().is_function_call(name="failing_tool")
        out = output_of(failed.expect.next_event().is_function_call_output(is_error=True))
        assert "read-only" in out["error"]

        mine = [
            c
            for c in mcp_server.calls()
            if c["meta"].get(IDEMPOTENCY_META_KEY, "").startswith(tc.call.call_id + ":")
        ]
        assert [c["tool"] for c in mine] == ["failing_tool"]  # once: not retried; open_ticket never sent
        st = await tc.synced()
        assert st.node == "start" and st.status == "live"


async def test_tools_are_pinned_once_a_new_agent_and_a_replay_never_list_again(
    temporal_client: Client, task_queue: str, scripted_llm: ScriptedLLM, worker: None, mcp_server: Server
) -> None:
    """An agent attached after a crash is offered the very tools the call started with, from
    the workflow's pinned definition; the history lists each server once, and replays."""
    definition = crm_flow(mcp_server.url)
    async with text_call(temporal_client, task_queue, scripted_llm, definition=definition) as tc:
        await tc.run.kill()
        await tc.attach()
        tc.reply(call("find_customer", phone="+1999"), say("I could not find you."))
        result = await tc.user("My number is 1999.")
        result.expect.next_event().is_function_call(name="find_customer")
        assert output_of(result.expect.next_event().is_function_call_output()) == {"found": False}
        req = tc.chats(with_tools=True)[-1]
        assert req.tool_names == ["done", "find_customer", "open_ticket", "failing_tool"]
        tc.reply(call("done"), say("Goodbye."))
        await tc.user("Thanks, bye.")
        await tc.synced()
        history = await tc.call.handle.fetch_history()

    listed = [
        e
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "mcp_list_tools"
    ]
    assert len(listed) == 1
    replayer = Replayer(workflows=[CallWorkflow], data_converter=temporal_client.data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, repr(result.replay_failure)


async def test_an_unreachable_server_leaves_its_tools_out_and_the_call_goes_on(
    temporal_client: Client, task_queue: str, scripted_llm: ScriptedLLM, worker: None
) -> None:
    definition = crm_flow(f"http://127.0.0.1:{unused_port()}/mcp")
    async with text_call(temporal_client, task_queue, scripted_llm, definition=definition) as tc:
        tc.reply(say("How can I help?"))
        await tc.user("Hello?")
        req = tc.chats(with_tools=True)[-1]
        assert req.tool_names == ["done"]
        st = await tc.synced()
        assert st.status == "live"
        assert any("could not be listed" in r.reason for r in st.rejected), st.rejected


async def test_a_hanging_server_delays_the_call_start_only_so_long(
    temporal_client: Client, task_queue: str, scripted_llm: ScriptedLLM, worker: None
) -> None:
    """A server that accepts connections and never answers: listing gives up (the activity's
    timeouts follow the server's timeout_s) and the call goes on without its tools."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    url = f"http://127.0.0.1:{silent.getsockname()[1]}/mcp"
    data = crm_flow(url).flow.model_dump(exclude_unset=True)
    data["mcp_servers"]["crm"]["timeout_s"] = 0.5
    report = validate_data(data)
    assert report.definition is not None, report.errors
    try:
        async with text_call(temporal_client, task_queue, scripted_llm, definition=report.definition) as tc:
            tc.reply(say("How can I help?"))
            await tc.user("Hello?")
            assert tc.chats(with_tools=True)[-1].tool_names == ["done"]
            st = await tc.synced()
            assert any("could not be listed" in r.reason for r in st.rejected), st.rejected
    finally:
        silent.close()


# --- the client on its own ------------------------------------------------------------------
async def test_list_tools_follows_every_page_and_leaves_out_unusable_tools(mcp_server: Server) -> None:
    listed = await list_tools(McpServer(url=mcp_server.url, timeout_s=5))
    names = [t.name for t in listed.tools]
    assert names == ["lookup_customer", "open_ticket", "failing_tool", "order_status", "bad-name"]
    assert listed.error is None and listed.left_out == {}


async def test_a_servers_pinned_tools_are_bounded_in_size(
    mcp_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """They travel in the call's input and every snapshot: past the budget, tools are left out."""
    import ringflow.activities.mcp_client as client

    monkeypatch.setattr(client, "MAX_SERVER_CHARS", 600)
    listed = await list_tools(McpServer(url=mcp_server.url, timeout_s=5))
    assert 1 <= len(listed.tools) < 4
    assert sum(len(t.model_dump_json()) for t in listed.tools) <= 600
    assert any("characters" in why for why in listed.left_out.values()), listed.left_out


async def test_a_stdio_server_is_listed_and_called(tmp_path: Path) -> None:
    """``command:`` (local development): the server runs as a subprocess per request."""
    from ringflow.activities.mcp_client import call_tool

    log = tmp_path / "calls.jsonl"
    server = McpServer(
        command=[sys.executable, "-m", "tests.support.mcp_server", "stdio", str(log)],
        env={"PYTHONPATH": str(ROOT)},
        timeout_s=20,
    )
    listed = await list_tools(server)
    assert [t.name for t in listed.tools][:2] == ["lookup_customer", "open_ticket"]
    result, error = await call_tool(server, "lookup_customer", {"phone": "+15550100"}, "c-1:1")
    assert error is None and result["name"] == "Dana Reyes"
    assert json.loads(log.read_text())["meta"][IDEMPOTENCY_META_KEY] == "c-1:1"


# --- validation -----------------------------------------------------------------------------
def _errors(flow: dict[str, Any]) -> list[str]:
    return [f"{e.path}: {e.message}" for e in validate_data(flow).errors]


def test_validation_names_each_mcp_mistake() -> None:
    flow = yaml.safe_load("""
flow: crm
mcp_servers:
  crm: {url: "https://crm.example/mcp"}
  Bad-Name: {url: "https://x.example/mcp"}
nodes:
  start:
    task: Help.
    functions:
      - {name: a, mcp: {server: crn, tool: lookup}}
      - {name: b, mcp: {server: crm, tool: lookup}, parameters: {type: object}}
      - {mcp: {server: crm, tools: [x, x, "no-good"]}, description: Nope.}
      - {name: done, description: Done., transition_only: true, transition_to: bye}
  act:
    type: action
    run: {name: c, mcp: {server: crm, tool: lookup}}
    transition_to: bye
  bye: {type: end, task: Bye.}
""")
    errors = _errors(flow)
    expected = [
        "nodes.start.functions[0].mcp.server: unknown MCP server 'crn' (did you mean 'crm'?)",
        "nodes.start.functions[1].parameters: an mcp entry takes its parameters from the server",
        "nodes.start.functions[2].description: with 'tools', each tool keeps the server's description",
        "nodes.start.functions[2].mcp.tools[1]: 'x' is listed twice",
        "nodes.start.functions[2].mcp.tools[2]: 'no-good' cannot be offered to the LLM",
        "nodes.act.run: an action node runs a handler or an http entry",
        "mcp_servers.Bad-Name: MCP server name 'Bad-Name' must be lower-case",
    ]
    for want in expected:
        assert any(e.startswith(want) for e in errors), (want, errors)


def test_validation_refuses_bad_server_shapes() -> None:
    base = {
        "flow": "f",
        "nodes": {
            "s": {
                "task": "t",
                "functions": [
                    {"name": "x", "mcp": {"server": "crm", "tool": "t"}},
                    {"name": "done", "description": "d", "transition_only": True, "transition_to": "e"},
                ],
            },
            "e": {"type": "end", "task": "bye"},
        },
    }
    cases = {
        "exactly one of 'url' (Streamable HTTP) or 'command'": {"timeout_s": 5},
        "must be an http:// or https:// address": {"url": "ftp://crm/mcp"},
        "'headers' apply only to a server with a 'url'": {"command": ["srv"], "headers": {"a": "b"}},
        "greater than 0": {"url": "https://crm/mcp", "timeout_s": 0},
    }
    for message, server in cases.items():
        errors = _errors({**base, "mcp_servers": {"crm": server}})
        assert any(message in e and e.startswith("mcp_servers.crm") for e in errors), (message, errors)
    both = {**base, "mcp_servers": {"crm": {"url": "https://crm/mcp"}}}
    both["nodes"]["s"]["functions"][0] = {"name": "x", "mcp": {"server": "crm", "tool": "t", "tools": "all"}}
    assert any("exactly one of 'tool'" in e for e in _errors(both))
    ok = {**base, "mcp_servers": {"crm": {"url": "https://crm/mcp", "headers": {"X-Key": "k"}}}}
    ok["nodes"]["s"]["functions"][0] = {"name": "x", "mcp": {"server": "crm", "tool": "t"}}
    report = validate_data(ok)
    assert report.ok and not report.warnings, (report.errors, report.warnings)


# --- flow validate --mcp --------------------------------------------------------------------
def test_flow_validate_mcp_contacts_the_servers_only_when_asked(mcp_server: Server, tmp_path: Path) -> None:
    """Offline by default; ``--mcp`` lists each server and names, with its path, a server that
    does not answer and a tool the server lacks (a tool whose name no LLM accepts is fine
    under an entry's own name)."""
    from typer.testing import CliRunner

    from ringflow.cli import app

    dead = f"http://127.0.0.1:{unused_port()}/mcp"
    flow = {
        "flow": "crm-check",
        "mcp_servers": {
            "crm": {"url": mcp_server.url, "timeout_s": 5},
            "gone": {"url": dead, "timeout_s": 2},
        },
        "nodes": {
            "start": {
                "task": "Help.",
                "functions": [
                    {"name": "find", "mcp": {"server": "crm", "tool": "lookup_customer"}},
                    {"name": "ghost", "mcp": {"server": "crm", "tool": "lookup_ghost"}},
                    {"name": "odd", "mcp": {"server": "crm", "tool": "bad-name"}},
                    {"name": "other", "mcp": {"server": "gone", "tool": "anything"}},
                    {"name": "done", "description": "Done.", "transition_only": True, "transition_to": "bye"},
                ],
            },
            "bye": {"type": "end", "task": "Bye."},
        },
    }
    path = tmp_path / "crm.yaml"
    path.write_text(yaml.safe_dump(flow))
    runner = CliRunner()

    offline = runner.invoke(app, ["flow", "validate", str(path)])
    assert offline.exit_code == 0 and "valid" in offline.output, offline.output

    online = runner.invoke(app, ["flow", "validate", "--mcp", "--json", str(path)])
    assert online.exit_code == 1, online.output
    errors = {e["path"]: e["message"] for e in json.loads(online.output)["errors"]}
    assert "cannot be listed" in errors["mcp_servers.gone"]
    assert "has no tool 'lookup_ghost'" in errors["nodes.start.functions[1].mcp.tool"]
    assert "lookup_customer" in errors["nodes.start.functions[1].mcp.tool"]  # what it has instead
    assert set(errors) == {"mcp_servers.gone", "nodes.start.functions[1].mcp.tool"}  # 'odd' is fine


def test_server_descriptions_are_plain_text_not_templates() -> None:
    """A server's description with ``{{...}}`` neither breaks the call's engine nor pulls the
    call's values into the prompt: it is offered as text."""
    from ringflow.callflow.engine import Engine
    from ringflow.callflow.events import CallStarted
    from ringflow.callflow.mcp_spec import McpServerTools, McpTool
    from ringflow.callflow.mcp_tools import pinned_definition

    definition = crm_flow("https://crm.example/mcp")
    schema = {
        "type": "object",
        "properties": {"customer": {"type": "string"}, "summary": {"type": "string"}},
        "required": ["customer", "summary"],
    }
    pinned = pinned_definition(
        definition,
        {
            "crm": McpServerTools(
                tools=[
                    McpTool(
                        name="open_ticket",
                        description="Opens {{call_id}} tickets {{ bad",
                        input_schema=schema,
                    )
                ]
            )
        },
    )
    engine = Engine(pinned)
    tools = {t.name: t for t in engine.snapshot(engine.start(CallStarted(call_id="c1")).state).tools}
    assert tools["open_ticket"].description == "Opens { {call_id} } tickets { { bad"
    assert "find_customer" not in tools  # the server did not list lookup_customer: not offered


# --- the example flow -----------------------------------------------------------------------
# Not under examples/flows and examples/scripts: its scripts need the example's MCP server.
EXAMPLE_FLOW = ROOT / "examples" / "mcp" / "crm_mcp" / "flow.yaml"
EXAMPLE_SCRIPTS = sorted((ROOT / "examples" / "mcp" / "scripts").glob("*.yaml"))


@pytest.fixture(scope="module")
def example_scripts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Path]]:
    """The example CRM server on a free port, and the example flow and scripts pointed at it
    (copies: the flow names the server's default port)."""
    port = unused_port()
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLE_FLOW.parent / "crm_server.py"), str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    work = tmp_path_factory.mktemp("crm_example")
    try:

        async def ready() -> bool:
            try:
                return bool((await list_tools(McpServer(url=url, timeout_s=2))).tools)
            except Exception:
                return proc.poll() is not None

        asyncio.run(wait_until(ready, timeout=30, what="the example CRM server to answer"))
        assert proc.poll() is None, "the example CRM server exited"
        (work / "crm_mcp").mkdir(parents=True)
        (work / "scripts").mkdir()
        text = EXAMPLE_FLOW.read_text()
        assert "http://127.0.0.1:8765/mcp" in text
        (work / "crm_mcp" / "flow.yaml").write_text(text.replace("http://127.0.0.1:8765/mcp", url))
        copies = []
        for script in EXAMPLE_SCRIPTS:
            copy = work / "scripts" / script.name
            copy.write_text(script.read_text())
            copies.append(copy)
        yield copies
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.timeout(300)
async def test_example_crm_scripts_pass_also_with_the_agent_killed_on_every_turn(
    temporal_server: Any, example_scripts: list[Path]
) -> None:
    """``ringflow call simulate`` on the CRM example against its own MCP server: every script
    passes as it is and with the agent killed (and resumed) during each of its turns."""
    from ringflow.simulation.scripts import load_script
    from ringflow.simulation.simulator import environment, run_script

    assert len(example_scripts) >= 2
    report = validate_file(EXAMPLE_FLOW)  # offline, as flow validate does by default
    assert report.ok and not report.warnings, (report.errors, report.warnings)
    async with environment(temporal_server.address) as (client, task_queue, llm, _):
        for path in example_scripts:
            result = await run_script(path, client, task_queue, llm)
            assert result.ok, (path.name, result.failures, result.error)
            for turn in range(len(load_script(path)[0].turns)):
                killed = await run_script(path, client, task_queue, llm, kill_at=turn)
                assert killed.ok and killed.kills == 1, (path.name, turn, killed.failures, killed.error)
                assert (killed.path, killed.disposition) == (result.path, result.disposition)


def test_flow_show_names_the_server_tools_an_entry_offers() -> None:
    from typer.testing import CliRunner

    from ringflow.cli import app

    out = CliRunner().invoke(app, ["flow", "show", str(EXAMPLE_FLOW)])
    assert out.exit_code == 0, out.output
    assert "crm: order_status, open_ticket (mcp)" in out.output
    assert "find_customer (mcp)" in out.output


async def test_continue_as_new_keeps_the_pinned_tools_without_listing_again(
    temporal_client: Client, task_queue: str, worker: None, mcp_server: Server
) -> None:
    """A long call continues as new: the next run carries the pinned definition, offers the
    same tools to a (re)attaching agent and runs them, and never lists the servers again."""
    from ringflow.workflows.client import start_call
    from tests.support.wfkit import Agent, offered, req, wait_state

    call = await start_call(
        temporal_client, crm_flow(mcp_server.url), task_queue=task_queue, max_history_events=50
    )
    first = await call.attach("agent-1")
    agent = Agent(call)
    for i in range(30):
        await agent.say(("user", f"turn {i}"))
    st = await wait_state(call, lambda s: s.runs >= 2, timeout=60, what="a continue-as-new")
    assert st.status in ("live", "dialing")
    again = await call.attach("agent-2", after_seq=agent.seq)
    assert offered(again)[1] == offered(first)[1]
    assert again.definition.mcp == first.definition.mcp is not None
    res = await call.call_function(req("start", "find_customer", phone="+15550100"))
    assert res.error is False and res.result["name"] == "Dana Reyes"

    def listed(history: Any) -> int:
        return sum(
            1
            for e in history.events
            if e.HasField("activity_task_scheduled_event_attributes")
            and e.activity_task_scheduled_event_attributes.activity_type.name == "mcp_list_tools"
        )

    latest = temporal_client.get_workflow_handle(call.handle.id)
    desc = await latest.describe()
    assert desc.run_id != call.handle.result_run_id
    assert listed(await latest.fetch_history()) == 0
    started = temporal_client.get_workflow_handle(call.handle.id, run_id=call.handle.result_run_id)
    assert listed(await started.fetch_history()) == 1
    await call.handle.terminate("test over")


def test_a_server_tool_with_an_odd_name_is_offered_under_the_entrys_name() -> None:
    """``tool: bad-name`` with ``name: odd``: the LLM sees ``odd``, the server gets ``bad-name``;
    ``tools: all`` leaves such a tool out, with a note."""
    from ringflow.callflow.engine import Engine
    from ringflow.callflow.events import CallStarted, FunctionCalled
    from ringflow.callflow.mcp_spec import McpServerTools, McpTool
    from ringflow.callflow.mcp_tools import missing_tools, pinned_definition

    report = validate_data(
        {
            "flow": "odd",
            "mcp_servers": {"crm": {"url": "https://crm.example/mcp"}},
            "nodes": {
                "s": {
                    "task": "t",
                    "functions": [
                        {"name": "odd", "mcp": {"server": "crm", "tool": "bad-name"}},
                        {"mcp": {"server": "crm", "tools": "all"}},
                        {"name": "done", "description": "d", "transition_only": True, "transition_to": "e"},
                    ],
                },
                "e": {"type": "end", "task": "bye"},
            },
        }
    )
    assert report.definition is not None, report.errors
    listed = McpServerTools(tools=[McpTool(name="bad-name", description="Odd."), McpTool(name="fine")])
    pinned = pinned_definition(report.definition, {"crm": listed})
    engine = Engine(pinned)
    state = engine.start(CallStarted(call_id="c1")).state
    snap = engine.snapshot(state)
    assert snap is not None and [t.name for t in snap.tools] == ["done", "odd", "fine"]
    run = engine.apply(state, FunctionCalled(name="odd", args={}, node="s")).effects[0]
    assert (run.kind, run.mcp_server, run.mcp_tool) == ("mcp", "crm", "bad-name")  # type: ignore[union-attr]
    assert any("'bad-name' not offered" in n for n in missing_tools(pinned))


def clash_flow(url: str) -> dict[str, Any]:
    """A global function and a server tool of one name, the tool offered by a node's entry."""
    return {
        "flow": "clash",
        "mcp_servers": {"crm": {"url": url, "timeout_s": 5}},
        "global_functions": [
            {"name": "open_ticket", "description": "Hand the caller to a person.", "transition_only": True}
            | {"transition_to": "bye"}
        ],
        "nodes": {
            "start": {
                "task": "Help.",
                "functions": [
                    {"mcp": {"server": "crm", "tools": ["open_ticket", "lookup_customer"]}},
                    {"name": "done", "description": "Done.", "transition_only": True, "transition_to": "bye"},
                ],
            },
            "bye": {"type": "end", "task": "Bye."},
        },
    }


def test_a_server_tool_named_like_a_global_function_does_not_replace_it(
    mcp_server: Server, tmp_path: Path
) -> None:
    """The flow's own function wins (the caller's way to a person once ran the server's
    tool instead); the clash is a note at pinning and an error of ``flow validate --mcp``."""
    from typer.testing import CliRunner

    from ringflow.callflow.engine import Engine
    from ringflow.callflow.events import CallStarted, FunctionCalled
    from ringflow.callflow.mcp_spec import McpServerTools, McpTool
    from ringflow.callflow.mcp_tools import missing_tools, pinned_definition
    from ringflow.cli import app

    report = validate_data(clash_flow("https://crm.example/mcp"))
    assert report.definition is not None, report.errors
    listed = McpServerTools(
        tools=[McpTool(name="open_ticket", description="Open a ticket."), McpTool(name="lookup_customer")]
    )
    pinned = pinned_definition(report.definition, {"crm": listed})
    engine = Engine(pinned)
    state = engine.start(CallStarted(call_id="c1")).state
    snap = engine.snapshot(state)
    assert snap is not None
    tools = {t.name: t for t in snap.tools}
    assert sorted(tools) == ["done", "lookup_customer", "open_ticket"]
    assert "a person" in tools["open_ticket"].description
    step = engine.apply(state, FunctionCalled(name="open_ticket", args={}, node="start"))
    assert step.state.node == "bye"  # the flow's transition, not a tools/call
    assert not any(getattr(e, "kind", None) == "mcp" for e in step.effects)
    notes = missing_tools(pinned)
    assert any("tool 'open_ticket'" in n and "flow's own function 'open_ticket'" in n for n in notes), notes

    path = tmp_path / "clash.yaml"
    path.write_text(yaml.safe_dump(clash_flow(mcp_server.url)))
    online = CliRunner().invoke(app, ["flow", "validate", "--mcp", "--json", str(path)])
    assert online.exit_code == 1, online.output
    errors = {e["path"]: e["message"] for e in json.loads(online.output)["errors"]}
    assert set(errors) == {"nodes.start.functions[0].mcp"}, errors
    assert "named like the flow's own function 'open_ticket'" in errors["nodes.start.functions[0].mcp"]
