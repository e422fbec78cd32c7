"""The agent in livekit-agents text mode, attached to a real CallWorkflow.

Each test runs the production agent code (``attach_agent``, ``FlowController``,
``FlowAgent``/``LiveKitPort``) in an ``AgentSession`` with no room and no STT/TTS, its
LLM the livekit OpenAI plugin talking HTTP to a scripted lane; the call is a real
``CallWorkflow`` on the dev server with a worker in this process. So what is checked is
what a caller and the LLM would get (``RunResult`` events, the requests the "model"
received) and what the durable record says (state query, final record), not internals.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from livekit.agents import llm as lk_llm
from livekit.agents.voice.run_result import FunctionCallOutputAssert
from temporalio.client import Client

from ringflow.agents import flow_agent
from ringflow.agents.controller import WRAP_UP
from ringflow.callflow.engine import IDLE_INSTRUCTIONS
from ringflow.callflow.idle import idle_instructions
from ringflow.contract.wire import MAX_ARGS_BYTES, MAX_TEXT_CHARS
from ringflow.simulation.scripted_llm import RecordedRequest, ScriptedLLM
from tests.support.agentkit import TIMEOUT_S, TextCall, call, said, say, system_prompt, text_call
from tests.support.wfkit import wait_until

ROLE = "You are Sam at the Harbour front desk."
GREETING = "Welcome to the Harbour desk. How can I help?"
WELCOME_TOOLS = [
    "to_booking",
    "start_over",
    "to_quiet",
    "to_fresh",
    "to_summary",
    "opening_hours",
    "broken",
    "check_room",
    "wrap_up",
]
BOOKING_PROMPT = f"{ROLE}\n\nBook a table for the caller."

pytestmark = pytest.mark.timeout(300)  # a backstop for a hung test: every wait inside is bounded by TIMEOUT_S


@pytest_asyncio.fixture
async def tc(
    temporal_client: Client, task_queue: str, scripted_llm: ScriptedLLM, worker: None
) -> AsyncIterator[TextCall]:
    """A desk.yaml call with an agent attached: its greeting has been said."""
    async with text_call(temporal_client, task_queue, scripted_llm) as t:
        yield t


def answer(req: RecordedRequest) -> str:
    """What the scripted model answered a request (bot-initiated turns get a filler)."""
    assert req.response is not None
    return str(req.response["choices"][0]["message"]["content"])


def output_of(ev: FunctionCallOutputAssert) -> Any:
    """A function call output as the LLM reads it, decoded: it must be JSON text."""
    return json.loads(ev.event().item.output)


# --- transitions --------------------------------------------------------------------------
async def test_transition_applies_the_new_node_in_place_and_the_workflow_follows(tc: TextCall) -> None:
    """A transition-only function moves the call at once, on the hot path: the very next LLM
    request already carries the new node's prompt and tools, with no new agent (no handoff);
    the workflow learns of it through the outbox and ends up on the same path."""
    agent = tc.session.current_agent
    tc.reply(call("to_booking"), say("Sure, for what time?"))
    result = await tc.user("I'd like a table tonight.")

    result.expect.next_event().is_function_call(name="to_booking")
    out = result.expect.next_event().is_function_call_output(is_error=False)
    assert output_of(out) == {"status": "ok"}
    result.expect.next_event().is_message(role="assistant")
    result.expect.no_more_events()

    first, second = tc.chats()
    assert system_prompt(first) == f"{ROLE}\n\nFind out what the caller needs."
    assert first.tool_names == WELCOME_TOOLS
    assert system_prompt(second) == BOOKING_PROMPT
    assert second.tool_names == ["book", "wrap_up"]
    assert "I'd like a table tonight." in said(second, "user")  # context: append keeps the turn
    # The new node's turn starts once the transition's output is in the context: the model
    # reads the real result, not livekit's "still in progress" stand-in for a running tool.
    assert [m.get("content") for m in second.messages if m.get("role") == "tool"] == ['{"status": "ok"}']
    assert tc.session.current_agent is agent and agent.instructions == BOOKING_PROMPT
    assert tc.controller.node == "booking"

    st = await tc.synced()
    assert st.node == "booking" and st.path == ["welcome", "booking"] and st.transitions == 1
    transcript = await tc.call.transcript()
    assert [(t.role, t.node) for t in transcript] == [
        ("assistant", "welcome"),
        ("user", "welcome"),
        ("assistant", "booking"),
    ]
    assert transcript[-1].text == "Sure, for what time?"


# --- node functions -------------------------------------------------------------------------
async def test_node_function_runs_in_the_workflow_and_its_result_goes_to_the_llm(tc: TextCall) -> None:
    """A handler entry is a ``call_function`` update: the workflow runs the handler (durably,
    with ``flow_manager.state``) and the LLM gets its result as JSON before it answers; the
    call stays on the node."""
    tc.reply(call("opening_hours", day="Monday"), say("We're open 9 to 5 on Monday."))
    result = await tc.user("When are you open on Monday?")

    result.expect.next_event().is_function_call(name="opening_hours", arguments={"day": "Monday"})
    out = result.expect.next_event().is_function_call_output(is_error=False)
    assert output_of(out) == {"day": "Monday", "hours": "9 to 5"}
    result.expect.next_event().is_message(role="assistant")
    result.expect.no_more_events()

    answer = (await tc.request(1)).messages
    tool_msg = next(m for m in answer if m.get("role") == "tool")
    assert json.loads(tool_msg["content"]) == {"day": "Monday", "hours": "9 to 5"}
    assert tc.controller.node == "welcome"
    st = await tc.synced()
    assert st.node == "welcome" and st.path == ["welcome"] and st.state == {"asked_day": "Monday"}


async def test_bad_function_calls_come_back_to_the_llm_as_errors(tc: TextCall) -> None:
    """The LLM's mistakes are answers, not crashes: invalid arguments and a failing handler
    come back from the workflow as ``{"status": "error"}`` outputs flagged as errors, an
    unknown name is refused before anything runs, and the call stays put and live."""
    tc.reply(call("opening_hours", day=5), say("Sorry, which day?"))
    bad_args = await tc.user("Hours for day five?")
    bad_args.expect.next_event().is_function_call(name="opening_hours")
    out = bad_args.expect.next_event().is_function_call_output(is_error=True)
    err = output_of(out)
    assert isinstance(err, dict) and err["status"] == "error" and "day" in err["error"]
    bad_args.expect.next_event().is_message(role="assistant")
    bad_args.expect.no_more_events()

    tc.reply(call("broken"), say("Our system is down, sorry."))
    failing = await tc.user("Is the system up?")
    failing.expect.next_event().is_function_call(name="broken")
    err = output_of(failing.expect.next_event().is_function_call_output(is_error=True))
    assert isinstance(err, dict) and err["status"] == "error" and "booking system is down" in err["error"]
    failing.expect.next_event().is_message(role="assistant")

    tc.reply(call("fly_to_the_moon"), say("I can't do that."))
    unknown = await tc.user("Fly me to the moon.")
    # livekit refuses a name it was not offered before any tool runs (it records only the output)
    unknown.expect.skip_next_event_if(type="function_call", name="fly_to_the_moon")
    text = unknown.expect.next_event().is_function_call_output(is_error=True).event().item.output
    assert "fly_to_the_moon" in text and "opening_hours" in text  # the LLM is told what exists
    unknown.expect.next_event().is_message(role="assistant")
    # The controller itself answers an unknown name the same way, listing the node's functions.
    direct = await tc.controller.on_tool_call("fly_to_the_moon", {})
    assert direct.error and "to_booking" in direct.result["valid_functions"]

    st = await tc.synced()
    assert st.node == "welcome" and st.status == "live" and st.state == {}
    # refused by the flow, and counted on both sides: the handler's arguments (in the
    # workflow), the name livekit refused (reported by the agent, marked) and the direct call
    assert st.refused == tc.controller.state.refused == 3
    assert any("'?fly_to_the_moon'" in r.reason for r in st.rejected)


async def test_refused_function_calls_are_counted_on_both_sides_and_kept_in_the_record(tc: TextCall) -> None:
    """A call the agent's engine refuses itself (a name the node does not offer, arguments a
    transition does not take) never ran in the workflow: the agent reports it through its
    outbox, so the workflow's engine counts it as the agent's does, the workflow's own refusals
    (a node function's arguments) are counted there and adopted by the agent, and the call's
    record keeps the count a canary compares its sides by."""
    assert (await tc.controller.on_tool_call("fly_to_the_moon", {})).error  # not offered
    assert (await tc.controller.on_tool_call("to_booking", {"unexpected": 1})).error  # a transition's args
    assert tc.controller.state.refused == 2
    st = await tc.synced()
    assert st.refused == 2 and st.node == "welcome"
    assert sum("fly_to_the_moon" in r.reason for r in st.rejected) == 1  # and why, in the call's notes
    tc.reply(call("opening_hours", day=5), say("Sorry, which day?"))
    await tc.user("Hours for day five?")  # refused by the workflow's engine (a handler's arguments)
    assert tc.controller.state.refused == 3 and (await tc.synced()).refused == 3
    tc.reply(call("wrap_up"), say("Goodbye!"))
    await tc.user("That's all.")
    record = await tc.ended()
    assert record.refused == 3 and record.end_reason == "completed"


# --- greetings ------------------------------------------------------------------------------
async def test_greeting_is_said_on_entering_kept_in_context_and_not_repeated_on_self_reentry(
    tc: TextCall,
) -> None:
    """The start node's greeting is spoken (a ``say``, not an LLM turn), recorded, and in the
    chat context so the LLM does not greet again; re-entering the node from itself does not
    say it twice: the LLM speaks instead (respond_immediately)."""
    assert [(s.source, s.node) for s in tc.speeches] == [("say", "welcome")]
    assert tc.chats() == []  # nothing asked of the LLM to greet
    tc.reply(call("start_over"), say("Of course, let's start again. What do you need?"))
    result = await tc.user("Hello, who is this?")

    first = await tc.request(0)
    assert said(first, "assistant")[0] == GREETING  # the LLM sees it said
    result.expect.next_event().is_function_call(name="start_over")
    result.expect.next_event().is_function_call_output()
    result.expect.next_event().is_message(role="assistant")
    result.expect.no_more_events()
    assert [s.source for s in tc.speeches].count("say") == 1  # no second greeting
    greetings = [i for i in tc.history() if getattr(i, "text_content", None) == GREETING]
    assert len(greetings) == 1
    second = await tc.request(1)
    assert said(second, "assistant").count(GREETING) == 1

    st = await tc.synced()
    assert st.path == ["welcome", "welcome"]
    transcript = await tc.call.transcript()
    assert [t.text for t in transcript if t.role == "assistant"] == [
        GREETING,
        "Of course, let's start again. What do you need?",
    ]


# --- branch tables and end nodes -------------------------------------------------------------
async def test_branch_table_moves_the_call_on_the_handler_result(tc: TextCall) -> None:
    """A handler's result picks the next node through the branch table: the workflow ran it,
    the agent applies the move it reports (new prompt and tools for the next request)."""
    tc.reply(call("check_room", party=4), say("Good news, we have room. What time?"))
    result = await tc.user("Room for four tonight?")

    result.expect.next_event().is_function_call(name="check_room", arguments={"party": 4})
    out = result.expect.next_event().is_function_call_output(is_error=False)
    assert output_of(out) == {"status": "free", "party": 4}
    result.expect.next_event().is_message(role="assistant")
    result.expect.no_more_events()
    nxt = await tc.request(1)
    assert system_prompt(nxt) == BOOKING_PROMPT and nxt.tool_names == ["book", "wrap_up"]
    assert tc.controller.node == "booking"
    st = await tc.synced()
    assert st.node == "booking" and st.path == ["welcome", "booking"]


async def test_branch_into_an_end_node_speaks_its_turn_then_ends_the_call(tc: TextCall) -> None:
    """A branch into an end node: the end node's turn is spoken, then the agent hangs up with
    ``completed`` and the workflow records that last turn and the node's disposition."""
    tc.reply(call("check_room", party=9), say("Sorry, we are full tonight. Goodbye."))
    result = await tc.user("Room for nine?")
    result.expect.next_event().is_function_call(name="check_room")
    result.expect.next_event().is_function_call_output()
    result.expect.next_event().is_message(role="assistant")
    record = await tc.ended()
    assert record.path == ["welcome", "full"]
    assert record.end_reason == "completed" and record.disposition == "full"
    assert record.transcript[-1]["role"] == "assistant" and record.transcript[-1]["node"] == "full"
    assert record.transcript[-1]["text"] == "Sorry, we are full tonight. Goodbye."


async def test_end_node_gets_one_turn_then_the_call_completes_with_a_hangup(tc: TextCall) -> None:
    """Entering an end node (a transition-only global function) is how a call finishes: one
    LLM turn with the end node's prompt, then the agent's hangup ends the workflow at once
    (it does not wait out the final-turn grace) with the last assistant turn recorded."""
    tc.reply(call("wrap_up"), say("Thanks for calling the Harbour. Goodbye!"))
    result = await tc.user("That's all, thanks.")
    result.expect.next_event().is_function_call(name="wrap_up")
    result.expect.next_event().is_function_call_output()
    result.expect.next_event().is_message(role="assistant")
    result.expect.no_more_events()
    last = await tc.request(1)
    assert system_prompt(last) == f"{ROLE}\n\nThank the caller and say goodbye."
    assert last.tool_names == []  # an end node offers no global functions
    record = await tc.ended()
    assert tc.controller.end_reason == "completed"
    assert record.path == ["welcome", "goodbye"] and record.end_reason == "completed"
    assert record.disposition == "done"
    assert [(t["role"], t["text"]) for t in record.transcript][-2:] == [
        ("user", "That's all, thanks."),
        ("assistant", "Thanks for calling the Harbour. Goodbye!"),
    ]
    st = await tc.call.state()
    assert st.status == "ended"
    assert not [r for r in st.rejected if "no hangup" in r.reason]


async def test_an_agent_whose_call_was_ended_elsewhere_leaves_at_its_next_event(tc: TextCall) -> None:
    """An operator hangs up (or the workflow's backstop fires) while the agent is on the
    line: the next thing the agent sends fails for good (the workflow has completed), and the
    agent stops instead of retrying forever: it goes quiet and hangs up its side."""
    tc.reply(say("Of course."))
    await tc.user("Hello there.")
    assert (await tc.synced()).status == "live"
    await tc.call.hangup("user_hangup")  # what `ringflow call hangup` sends
    record = await asyncio.wait_for(tc.call.handle.result(), TIMEOUT_S)
    assert record.end_reason == "user_hangup"

    tc.controller.heartbeat()  # the agent does not know yet
    outbox = tc.controller.outbox

    async def leaving() -> Any:
        return tc.controller.ending

    ending = await wait_until(leaving, TIMEOUT_S, "the agent to leave the call")
    await asyncio.wait_for(ending, TIMEOUT_S)
    assert outbox.gone is not None and outbox.send_errors == 1
    assert tc.controller.dead
    tc.controller.on_turn("user", "Hello? Anyone?")  # a late caller turn goes nowhere, quietly
    assert outbox.pending == 1  # only the heartbeat that found the call gone


async def test_a_turn_longer_than_the_workflow_takes_is_recorded_in_pieces_not_lost(tc: TextCall) -> None:
    """The workflow refuses a turn over MAX_TEXT_CHARS; the agent sends a longer one as
    consecutive turns of the same speaker, so the transcript keeps every character."""
    long = "".join(f"{i:05d} " for i in range(7_000))  # 42,000 characters
    tc.controller.on_turn("user", long)
    st = await tc.synced()
    assert st.rejected == []
    pieces = [t for t in await tc.call.transcript() if t.role == "user"]
    assert [len(t.text) for t in pieces] == [MAX_TEXT_CHARS, MAX_TEXT_CHARS, len(long) - 2 * MAX_TEXT_CHARS]
    assert "".join(t.text for t in pieces) == long and {t.node for t in pieces} == {"welcome"}


async def test_a_turn_with_a_nul_or_a_lone_surrogate_reaches_the_transcript_replaced(tc: TextCall) -> None:
    """STT or an LLM may produce U+0000 or an unpaired surrogate: the agent replaces each
    (a lone surrogate cannot even be encoded as a signal), and the turn is kept."""
    tc.controller.on_turn("user", "my code is 12\x0034 \ud83d")
    st = await tc.synced()
    assert st.rejected == []
    texts = [t.text for t in await tc.call.transcript() if t.role == "user"]
    assert texts == ["my code is 12\ufffd34 \ufffd"]


async def test_oversized_transition_arguments_are_refused_before_anything_moves(tc: TextCall) -> None:
    """A transition whose arguments the workflow's signal could not carry is refused to the
    LLM at once, with the limit named; the call stays where it was and nothing is queued."""
    await tc.synced()
    seq = tc.controller.seq
    out = await tc.controller.on_tool_call("to_booking", {"note": "x" * (MAX_ARGS_BYTES + 1)})
    assert out.error and out.run_llm
    assert f"larger than {MAX_ARGS_BYTES} bytes" in out.result["error"]
    assert tc.controller.node == "welcome" and tc.controller.seq == seq
    assert tc.controller.outbox.pending == 0
    assert (await tc.synced()).node == "welcome"


# --- idle and max duration ------------------------------------------------------------------
async def test_idle_reprompts_up_to_the_limit_then_says_goodbye_and_ends(tc: TextCall) -> None:
    """Silence makes the LLM check on the caller (idle instructions), at most
    ``idle.prompts`` times in a row; a caller turn resets the count; the next silence past
    the limit is the idle goodbye (said, uninterruptible, recorded) and a ``user_idle``
    hang-up on both sides: the agent's engine and the workflow's agree."""
    await tc.silence()
    prompt = await tc.request(0)
    assert said(prompt, "system")[-1] == IDLE_INSTRUCTIONS  # the re-prompt is an LLM turn
    assert tc.controller.state.idle_count == 1

    tc.reply(say("Great. How can I help?"))
    reply = await tc.user("Yes, sorry, I'm here.")
    reply.expect.next_event().is_message(role="assistant")
    reply.expect.no_more_events()
    assert tc.controller.state.idle_count == 0

    await tc.silence()
    await tc.silence()
    st = await tc.synced()
    assert st.status == "live" and not tc.controller.ended
    assert [IDLE_INSTRUCTIONS in r.text for r in tc.chats()] == [True, False, True, False]
    assert idle_instructions("silence", 2, 2, "end") in tc.chats()[3].text  # the second says so

    before = len(tc.speeches)
    await tc.silence()
    assert len(tc.chats()) == 4  # the goodbye is said, not generated
    goodbye = tc.speeches[before:]
    assert [(s.source, s.allow_interruptions) for s in goodbye] == [("say", False)]
    record = await tc.ended()
    assert record.end_reason == "user_idle" and record.path == ["welcome"]
    assert [t["role"] for t in record.transcript] == [
        "assistant",
        "assistant",
        "user",
        "assistant",
        "assistant",
        "assistant",
        "assistant",
    ]
    assert record.transcript[-1]["text"] == "Sorry, I can't hear you. Goodbye."


async def test_max_duration_wraps_up_then_ends_the_call(tc: TextCall) -> None:
    """The agent's own max-duration timer: one short uninterruptible wrap-up turn by the LLM,
    then the call ends with ``max_duration`` and the wrap-up is the record's last turn."""
    before = len(tc.speeches)
    await asyncio.wait_for(tc.controller.on_max_duration(), TIMEOUT_S)
    wrap = await tc.request(0)
    assert said(wrap, "system")[-1] == WRAP_UP
    assert [(s.source, s.allow_interruptions) for s in tc.speeches[before:]] == [("generate_reply", False)]
    record = await tc.ended()
    assert record.end_reason == "max_duration" and tc.controller.end_reason == "max_duration"
    assert record.transcript[-1]["role"] == "assistant"
    assert record.transcript[-1]["text"] == answer(wrap)


# --- interruptions --------------------------------------------------------------------------
async def test_allow_interrupt_false_makes_every_speech_on_the_node_uninterruptible(tc: TextCall) -> None:
    """``allow_interrupt: false`` mutes the caller while the bot speaks on that node: the
    greeting and the LLM's replies to the caller there are created uninterruptible; on a
    node that allows interruptions, replies are interruptible."""
    assert [(s.node, s.allow_interruptions) for s in tc.speeches] == [("welcome", True)]
    tc.reply(say("Happy to help."))
    await tc.user("Hi there.")
    tc.reply(call("to_quiet"))
    await tc.user("Read me the terms.")
    tc.reply(say("Term one: no refunds."))
    await tc.user("Go on.")
    seen = [(s.source, s.node, s.allow_interruptions) for s in tc.speeches]
    assert seen == [
        ("say", "welcome", True),  # the greeting
        ("generate_reply", "welcome", True),  # a reply on an interruptible node
        ("generate_reply", "welcome", True),  # the reply that called to_quiet
        ("say", "quiet", False),  # quiet's greeting
        ("generate_reply", "quiet", False),  # a reply to the caller on the quiet node
    ]
    tc.reply(call("wrap_up"), say("Goodbye!"))
    await tc.user("Thanks, bye.")
    assert [(s.node, s.allow_interruptions) for s in tc.speeches[5:]] == [
        ("quiet", False),  # the reply that called wrap_up, created on the quiet node
        ("goodbye", True),  # the end node's turn: interruptible again
    ]
    assert (await tc.ended()).path == ["welcome", "quiet", "goodbye"]


# --- context strategies ---------------------------------------------------------------------
async def test_context_reset_drops_earlier_messages_from_the_next_request(tc: TextCall) -> None:
    """``context: reset``: the LLM on the new node starts from its prompt alone; nothing
    said on earlier nodes (greeting and caller turns included) is in its next request."""
    tc.reply(say("Nice to meet you, Ann."))
    await tc.user("Hi, my name is Ann.")
    tc.reply(call("to_fresh"), say("Sure, what's the new topic?"))
    result = await tc.user("Different question.")
    result.expect.next_event().is_function_call(name="to_fresh")
    result.expect.next_event().is_function_call_output()
    result.expect.next_event().is_message(role="assistant")
    result.expect.no_more_events()

    fresh = await tc.request(2)
    assert system_prompt(fresh) == f"{ROLE}\n\nHelp with the new topic only."
    for old in (GREETING, "Hi, my name is Ann.", "Nice to meet you, Ann.", "Different question."):
        assert old not in fresh.text
    assert said(fresh, "user") == []
    tc.reply(say("Got it."))
    await tc.user("It's about parking.")
    after = await tc.request(3)
    assert said(after, "user") == ["It's about parking."]  # the node's own turns are kept
    assert "Hi, my name is Ann." not in after.text
    st = await tc.synced()
    assert st.path == ["welcome", "fresh"]


async def test_reset_with_summary_gives_the_next_request_a_summary_instead_of_history(tc: TextCall) -> None:
    """``reset_with_summary``: the LLM is asked (without tools) to summarise, and the new
    node starts from that summary instead of the earlier messages."""
    tc.reply(say("Hello Ann, a table for two, noted."))
    await tc.user("I'm Ann, I want a table for two.")
    tc.reply(call("to_summary"))
    tc.reply(say("Ann wants a table for two."))  # the summary request's answer
    await tc.user("Can someone else take over?")

    summary_req = next(r for r in tc.chats(with_tools=False))
    assert said(summary_req, "user")[-1] == flow_agent.SUMMARY_PROMPT
    assert "I'm Ann, I want a table for two." in summary_req.text  # it summarised the call
    entry = tc.chats(with_tools=True)[-1]
    assert system_prompt(entry) == f"{ROLE}\n\nTake over the call from the summary."
    assert "(Summary of the call so far: Ann wants a table for two.)" in said(entry, "assistant")
    assert "I'm Ann, I want a table for two." not in entry.text and GREETING not in entry.text
    assert (await tc.synced()).path == ["welcome", "summarised"]


async def test_reset_with_summary_falls_back_to_append_when_the_summary_request_fails(tc: TextCall) -> None:
    """A failed summary request must not cost the call its context: the new node keeps
    the whole conversation (``append``) and the call goes on."""
    tc.reply(say("Hello Ann."))
    await tc.user("I'm Ann.")
    gate = asyncio.Event()
    tc.lane.chat_gate = gate
    tc.reply(call("to_summary"))
    run = asyncio.ensure_future(tc.user("Hand me over please."))
    await tc.request(1, answered=False)  # the turn's request is past the failure check, held
    tc.lane.chat_gate = None
    tc.lane.fail_next(1, 400)  # so the summary request, next, fails (a 400 is not retried)
    gate.set()
    await asyncio.wait_for(run, TIMEOUT_S)

    failed = [r for r in tc.chats(with_tools=False)]
    assert len(failed) == 1 and failed[0].status == 400
    entry = tc.chats(with_tools=True)[-1]
    assert system_prompt(entry) == f"{ROLE}\n\nTake over the call from the summary."
    assert "I'm Ann." in said(entry, "user") and GREETING in said(entry, "assistant")
    assert not [m for m in said(entry, "assistant") if m.startswith("(Summary")]
    assert (await tc.synced()).path == ["welcome", "summarised"]


async def test_reset_with_summary_falls_back_to_append_when_the_summary_times_out(
    tc: TextCall, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A summary that does not come in time is given up (the caller would be waiting in
    silence): the new node keeps the whole conversation."""
    monkeypatch.setattr(flow_agent, "SUMMARY_TIMEOUT_S", 0.3)
    tc.reply(say("Hello Ann."))
    await tc.user("I'm Ann.")
    first_gate, summary_gate = asyncio.Event(), asyncio.Event()
    tc.lane.chat_gate = first_gate
    tc.reply(call("to_summary"))
    run = asyncio.ensure_future(tc.user("Hand me over please."))
    await tc.request(1, answered=False)
    tc.lane.chat_gate = summary_gate  # requests from now on are held: the summary first
    first_gate.set()
    entry = await tc.request(3, answered=False)  # the new node's turn, after the timeout
    summary_gate.set()
    await asyncio.wait_for(run, TIMEOUT_S)

    summary_req = tc.chats()[2]
    assert not summary_req.tools and said(summary_req, "user")[-1] == flow_agent.SUMMARY_PROMPT
    assert entry.tools and system_prompt(entry) == f"{ROLE}\n\nTake over the call from the summary."
    assert "I'm Ann." in said(entry, "user") and GREETING in said(entry, "assistant")
    assert not [m for m in said(entry, "assistant") if m.startswith("(Summary")]


# --- attach and resume ----------------------------------------------------------------------
def messages_of(ctx: lk_llm.ChatContext) -> list[tuple[str, str]]:
    return [
        (m.role, m.text_content or "")
        for m in ctx.items
        if isinstance(m, lk_llm.ChatMessage) and m.role in ("user", "assistant")
    ]


async def test_a_new_agent_resumes_where_the_killed_one_was_without_greeting_again(tc: TextCall) -> None:
    """An agent dies mid-call; the next one attached to the call carries on at the same node
    with the same prompt and tools, the conversation rebuilt from the workflow's transcript,
    and without greeting the caller again. Nothing the first agent did is applied twice."""
    tc.reply(call("to_booking"), say("Sure, for what time?"))
    await tc.user("A table please.")
    await tc.synced()
    first = tc.run
    await first.kill()

    before = len(tc.speeches)
    second = await tc.attach()
    assert second.resumed and second.controller.node == "booking"
    assert tc.speeches[before:] == []  # no greeting, no LLM turn: the caller is mid-conversation
    assert second.agent.instructions == BOOKING_PROMPT
    assert messages_of(second.agent.chat_ctx) == [
        ("assistant", GREETING),
        ("user", "A table please."),
        ("assistant", "Sure, for what time?"),
    ]

    tc.reply(call("book", time="7 PM"), say("Booked for 7 PM."))
    result = await tc.user("Seven PM.")
    result.expect.next_event().is_function_call(name="book", arguments={"time": "7 PM"})
    out = result.expect.next_event().is_function_call_output(is_error=False)
    assert output_of(out) == {"status": "booked", "time": "7 PM"}
    result.expect.next_event().is_message(role="assistant")
    result.expect.no_more_events()
    resumed = tc.chats()[-2]
    assert system_prompt(resumed) == BOOKING_PROMPT and resumed.tool_names == ["book", "wrap_up"]
    assert said(resumed, "assistant")[:2] == [GREETING, "Sure, for what time?"]
    assert said(resumed, "user") == ["A table please.", "Seven PM."]

    st = await tc.synced()
    assert st.agent_id == second.controller.agent_id
    assert st.node == "booking" and st.path == ["welcome", "booking"] and st.transitions == 1
    assert st.state == {"booked": "7 PM"}
    transcript = await tc.call.transcript()
    assert [t.text for t in transcript].count(GREETING) == 1


async def test_a_resumed_agent_answers_the_caller_the_dead_one_left_unanswered(tc: TextCall) -> None:
    """The caller spoke, the agent died before replying: its successor answers at once
    instead of leaving the caller in silence until the idle timer."""
    first = tc.run
    first.controller.on_turn("user", "Hello, is anyone there?")
    assert await first.outbox.flush(timeout=TIMEOUT_S)
    await first.kill()
    before = len(tc.speeches)
    tc.reply(say("Yes, I'm here. How can I help?"))
    second = await tc.attach()
    assert second.resumed
    assert [s.source for s in tc.speeches[before:]] == ["generate_reply"]
    answer = tc.chats()[-1]
    assert said(answer, "user")[-1] == "Hello, is anyone there?"


async def test_resume_on_a_reset_node_keeps_only_that_nodes_conversation(tc: TextCall) -> None:
    """A node entered with ``context: reset`` does not see earlier nodes; an agent that
    takes over there must not either, but must keep what was said on the node itself."""
    tc.reply(say("Hi Ann."))
    await tc.user("I'm Ann.")
    tc.reply(call("to_fresh"), say("What's the new topic?"))
    await tc.user("New topic.")
    tc.reply(say("Parking is free after six."))
    await tc.user("Is parking free?")
    await tc.synced()
    await tc.run.kill()

    second = await tc.attach()
    assert second.controller.node == "fresh"
    assert messages_of(second.agent.chat_ctx) == [
        ("assistant", "What's the new topic?"),
        ("user", "Is parking free?"),
        ("assistant", "Parking is free after six."),
    ]
    tc.reply(say("You're welcome."))
    await tc.user("Thanks.")
    nxt = tc.chats()[-1]
    assert system_prompt(nxt) == f"{ROLE}\n\nHelp with the new topic only."
    assert "I'm Ann." not in nxt.text and "Parking is free after six." in nxt.text


async def test_resume_on_a_summarised_node_starts_from_the_same_summary(tc: TextCall) -> None:
    """On a ``reset_with_summary`` node the agent's context is the summary plus the node's
    own turns. The summary goes to the transcript (a system turn), so an agent taking over
    there rebuilds that same context: it neither loses the summary nor sees the earlier
    conversation the summary replaced."""
    tc.reply(say("Hello Ann, a table for two, noted."))
    await tc.user("I'm Ann, I want a table for two.")
    tc.reply(call("to_summary"))
    tc.reply(say("Ann wants a table for two."))  # the summary request's answer
    await tc.user("Can someone else take over?")
    summary = "(Summary of the call so far: Ann wants a table for two.)"
    await tc.synced()
    transcript = await tc.call.transcript()
    assert [(t.role, t.text, t.node) for t in transcript if t.role == "system"] == [
        ("system", summary, "summarised")
    ]
    before = messages_of(tc.run.agent.chat_ctx)
    assert before[0] == ("assistant", summary)
    await tc.run.kill()

    second = await tc.attach()
    assert second.controller.node == "summarised"
    assert messages_of(second.agent.chat_ctx) == before
    tc.reply(say("Of course."))
    await tc.user("Still there?")
    nxt = tc.chats()[-1]
    assert summary in said(nxt, "assistant") and "I'm Ann, I want a table for two." not in nxt.text


async def test_a_resumed_agent_keeps_the_nodes_interruption_setting(tc: TextCall) -> None:
    """The interruption setting is the node's, not the agent process's: an agent taking over
    on an ``allow_interrupt: false`` node answers the caller uninterruptibly too."""
    tc.reply(call("to_quiet"))
    await tc.user("Terms please.")
    await tc.synced()
    await tc.run.kill()
    await tc.attach()
    before = len(tc.speeches)
    tc.reply(say("Term two: no pets."))
    await tc.user("And then?")
    assert [(s.node, s.allow_interruptions) for s in tc.speeches[before:]] == [("quiet", False)]
