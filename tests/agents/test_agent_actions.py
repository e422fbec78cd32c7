"""Action nodes seen from the agent: the workflow runs their function and routes on it, and
the agent arrives where the call went, saying everything on the way.

The agent applies a transition on its own engine at once, but an action node's function
runs only in the workflow: the agent must learn where its result sent the call, and then
speak and show that node exactly as if it had entered it itself (prompt, tools,
``pre_actions`` speech, greeting or first turn, an end node's last turn), after saying
the transition's own ``speech``. Same set-up as ``test_agent_text.py``: the production
agent code in livekit-agents text mode, a real ``CallWorkflow`` on the dev server with a
worker in this process, the LLM a scripted HTTP lane. What was said is read from the
workflow's transcript, i.e. what the caller heard as the record keeps it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from livekit.agents import UserStateChangedEvent
from temporalio.client import Client

from ringflow.callflow.handlers import load_module
from ringflow.callflow.loader import load_flow
from ringflow.callflow.model import FlowDefinition
from ringflow.contract.call import CallView
from ringflow.simulation.scripted_llm import ScriptedLLM
from tests.support.agentkit import FIXTURES, TIMEOUT_S, TextCall, call, desk, say, system_prompt, text_call
from tests.support.wfkit import wait_until

ROLE = "You are Ada at the Lakeside clinic."
HELLO = "Hello Dana, how can I help?"

pytestmark = pytest.mark.timeout(300)


def lookup() -> FlowDefinition:
    return load_flow(FIXTURES / "lookup.yaml")


@pytest_asyncio.fixture
async def tc(
    temporal_client: Client, task_queue: str, scripted_llm: ScriptedLLM, worker: None
) -> AsyncIterator[TextCall]:
    """A lookup.yaml call: its start action node has routed it and the agent has attached."""
    async with text_call(temporal_client, task_queue, scripted_llm, definition=lookup()) as t:
        yield t


async def assistant_said(tc: TextCall) -> list[str]:
    """What the caller heard, in order, as the workflow recorded it."""
    await tc.synced()
    return [t.text for t in await tc.call.transcript() if t.role == "assistant"]


# --- a start node that is an action (a pre-call lookup) --------------------------------------
async def test_start_action_node_routes_the_call_before_the_agent_takes_it(tc: TextCall) -> None:
    """The call starts on a lookup: the agent attaches on the node the lookup routed to, with
    its prompt, its tools and its greeting (rendered from the lookup's result)."""
    assert tc.controller.node == "welcome"
    assert tc.run.agent.instructions == f"{ROLE}\n\nFind out what the caller needs."
    assert sorted(t.id for t in tc.run.agent.tools) == [
        "ask_price",
        "note_reason",
        "open_notes",
        "pay_balance",
        "slow_lookup",
    ]
    assert await assistant_said(tc) == [HELLO]
    tc.reply(say("Sure."))
    await tc.user("Hi.")
    req = await tc.request(0)
    assert system_prompt(req) == f"{ROLE}\n\nFind out what the caller needs."
    assert req.tool_names == ["ask_price", "note_reason", "pay_balance", "slow_lookup", "open_notes"]
    st = await tc.synced()
    assert st.path == ["find", "welcome"] and st.state["patient"]["name"] == "Dana"


async def test_start_action_node_routing_to_an_end_node_says_its_greeting_and_ends(
    temporal_client: Client, task_queue: str, scripted_llm: ScriptedLLM, worker: None
) -> None:
    """A lookup that finds nothing routes straight to an end node: the caller still hears it."""
    async with text_call(
        temporal_client, task_queue, scripted_llm, definition=lookup(), variables={"patient_id": "p-404"}
    ) as tc:
        record = await tc.ended()
    assert record.path == ["find", "unknown_caller"]
    assert record.end_reason == "completed" and record.disposition == "unknown"
    assert [t["text"] for t in record.transcript if t["role"] == "assistant"] == [
        "Sorry, I could not find your record. Please call the front desk. Goodbye."
    ]


# --- transitions through action nodes ---------------------------------------------------------
async def test_transition_only_into_an_action_node_follows_its_routing_with_all_speech(tc: TextCall) -> None:
    """transition-only -> action -> agent node: the transition's speech, then the routed node's
    pre-action speech and first turn; the LLM's next request has that node's prompt and tools."""
    tc.reply(call("ask_price"), say("Anything else about the price?"))
    await tc.user("How much is a check-up?")
    assert tc.controller.node == "tell_price"
    req = await tc.request(1)
    assert system_prompt(req) == f"{ROLE}\n\nAnswer questions about the price."
    assert req.tool_names == ["done"]
    assert await assistant_said(tc) == [
        HELLO,
        "Let me look that up.",
        "A check-up costs 80 euros.",
        "Anything else about the price?",
    ]
    st = await tc.synced()
    assert st.path == ["find", "welcome", "quote", "tell_price"] and st.node == "tell_price"


async def test_capture_into_an_action_node_routing_to_an_end_node_says_the_last_turn(tc: TextCall) -> None:
    """capture -> action -> end node: the speech, the end node's pre-action speech and its LLM
    turn are all said before the hangup; the call completes with the end node's disposition."""
    tc.reply(call("note_reason", reason="chest pain", urgent=True), say("Take care, goodbye."))
    await tc.user("I have chest pain.")
    record = await tc.ended()
    assert record.path == ["find", "welcome", "triage", "nurse_callback"]
    assert record.end_reason == "completed" and record.disposition == "callback"
    assert [t["text"] for t in record.transcript if t["role"] == "assistant"] == [
        HELLO,
        "Thanks, one moment.",
        "A nurse will call you back today.",
        "Take care, goodbye.",
    ]
    last = await tc.request(1)
    assert system_prompt(last) == f"{ROLE}\n\nSay goodbye kindly."


async def test_handler_into_an_action_node_into_an_end_node_says_its_greeting(tc: TextCall) -> None:
    """handler -> action -> end: the handler runs in the workflow, whose action routes the call
    to an end node; the agent says the speech and the end node's greeting, then hangs up."""
    tc.reply(call("pay_balance"))
    await tc.user("I'd like to pay my balance.")
    record = await tc.ended()
    assert record.path == ["find", "welcome", "balance", "paid"]
    assert record.end_reason == "completed" and record.disposition == "paid"
    assert record.state["paying"] is True
    assert [t["text"] for t in record.transcript if t["role"] == "assistant"] == [
        HELLO,
        "Checking your balance.",
        "Your balance is paid. Goodbye.",
    ]


async def test_a_node_with_a_function_action_keeps_its_speech(tc: TextCall) -> None:
    """A node whose pre-actions run a handler (``function:``) is entered at once: the
    transition's speech and the node's ``tts_say`` are said, the handler runs in the workflow."""
    tc.reply(call("open_notes"), say("Your last visit was in May."))
    await tc.user("Can you read my notes?")
    assert tc.controller.node == "notes"
    assert await assistant_said(tc) == [
        HELLO,
        "Opening your notes.",
        "Your notes are open.",
        "Your last visit was in May.",
    ]
    st = await wait_until(lambda: _state_with(tc, "notes_opened"), what="the function action ran")
    assert st.path == ["find", "welcome", "notes"]
    # the next transition starts from the workflow's state, the action's write included
    tc.reply(call("done"), say("Goodbye."))
    await tc.user("Thanks.")
    record = await tc.ended()
    assert record.path == ["find", "welcome", "notes", "goodbye"] and record.state["notes_opened"] is True


async def _state_with(tc: TextCall, key: str) -> CallView | None:
    st = await tc.call.state()
    return st if key in st.state else None


# --- limits end the call through the agent -------------------------------------------------
@pytest.mark.parametrize(
    ("setting", "calls", "reason", "path"),
    [
        ("max_node_visits", ["start_over"], "loop_detected", ["welcome"]),
        ("max_transitions", ["to_booking", "wrap_up"], "max_transitions", ["welcome", "booking"]),
    ],
)
async def test_a_limit_hit_on_the_agent_ends_the_call_with_its_reason(
    temporal_client: Client,
    task_queue: str,
    scripted_llm: ScriptedLLM,
    worker: None,
    setting: str,
    calls: list[str],
    reason: str,
    path: list[str],
) -> None:
    """The agent's engine ends the call on a flow limit and reports it in its hangup: every
    end reason the engine produces is one the workflow's messages accept (this hangup once
    failed validation and the agent crashed)."""
    d = desk()
    flow = d.flow.model_copy(update={"settings": d.flow.settings.model_copy(update={setting: 1})})
    async with text_call(
        temporal_client, task_queue, scripted_llm, definition=d.model_copy(update={"flow": flow})
    ) as tc:
        for name in calls:
            tc.reply(call(name), say("Alright."))
            await tc.user("Next, please.")
        record = await tc.ended()
        st = await tc.call.state()
    assert tc.controller.end_reason == reason
    assert record.end_reason == reason and record.path == path
    assert not [r for r in st.rejected if "hangup" in r.reason]


# --- cancel_on_interruption ------------------------------------------------------------------
async def test_a_caller_barging_in_cancels_a_function_marked_cancel_on_interruption(tc: TextCall) -> None:
    """A slow handler marked ``cancel_on_interruption``: the caller starts talking while it
    runs (livekit's ``user_state_changed`` to ``speaking``). The agent asks the workflow to
    cancel, the workflow cancels the activity (the handler sees the cancellation), the LLM is
    told the call was cancelled without being asked to reply, and the log records it; the
    call carries on, on the same node."""
    handlers = load_module("lookup_handlers", FIXTURES)
    tc.reply(call("slow_lookup"))
    tc.controller.begin_turn("t-slow")
    running = tc.session.run(user_input="Can you find my old records?")
    started = handlers.RUNNING.setdefault(tc.call.call_id, asyncio.Event())
    await asyncio.wait_for(started.wait(), TIMEOUT_S)  # the handler is running in the worker

    tc.session.emit("user_state_changed", UserStateChangedEvent(old_state="listening", new_state="speaking"))
    result = await asyncio.wait_for(running, TIMEOUT_S)  # cancelled, not answered: see its output

    result.expect.next_event().is_function_call(name="slow_lookup")
    out = result.expect.next_event().is_function_call_output()
    assert "cancelled" in out.event().item.output
    result.expect.no_more_events()  # no reply to the cancelled call

    async def handler_cancelled() -> bool:  # it hears of it at its next heartbeat
        return tc.call.call_id in handlers.CANCELLED

    await wait_until(handler_cancelled, TIMEOUT_S, "the handler to be cancelled")
    st = await tc.synced()
    assert any("cancelled: the caller interrupted" in r.reason for r in st.rejected)
    assert st.node == "welcome" and "archive" not in st.state and st.pending_functions == 0

    tc.reply(say("Of course, what else can I do?"))  # the call goes on
    await tc.user("Never mind that.")
    assert (await assistant_said(tc))[-1] == "Of course, what else can I do?"


async def test_a_function_not_marked_cancel_on_interruption_runs_to_the_end(tc: TextCall) -> None:
    """Talking over a function that is not marked does not cancel it."""
    tc.reply(call("pay_balance"))
    tc.controller.begin_turn("t-pay")
    running = tc.session.run(user_input="Pay my balance.")
    tc.session.emit("user_state_changed", UserStateChangedEvent(old_state="listening", new_state="speaking"))
    await asyncio.wait_for(running, TIMEOUT_S)
    record = await tc.ended()
    assert record.path[-1] == "paid" and record.state["paying"] is True
