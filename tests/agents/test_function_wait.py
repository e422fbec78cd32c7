"""What the agent takes while it waits for a function's answer stays taken.

The workflow runs a handler; while it runs, the caller speaks (the agent applies the turn to
its engine and sends it, lingering in its outbox behind the function). The answer's state is
the workflow's from before that turn, and the workflow applies the turn on top of it once it
arrives: the agent does the same (``FlowController.rebased``), so both sides hold one state,
the turn's time included, instead of the agent taking the turn back.
A real ``CallWorkflow`` and a real ``AgentSession`` in text mode (``tests/support/agentkit.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest_asyncio
from temporalio.client import Client

from ringflow.callflow.handlers import load_module
from ringflow.callflow.loader import load_flow
from ringflow.callflow.state import CallState
from ringflow.simulation.scripted_llm import ScriptedLLM
from tests.support.agentkit import FIXTURES, TIMEOUT_S, TextCall, call, say, text_call
from tests.support.wfkit import running_worker


@pytest_asyncio.fixture
async def tc(
    temporal_client: Client, task_queue: str, sqlite_url: str, llm: ScriptedLLM
) -> AsyncIterator[TextCall]:
    definition = load_flow(FIXTURES / "waiting.yaml")
    async with (
        running_worker(temporal_client, task_queue, sqlite_url),
        text_call(temporal_client, task_queue, llm, definition=definition) as call_,
    ):
        yield call_


async def test_the_caller_s_turn_while_a_function_runs_stays_on_top_of_its_answer(tc: TextCall) -> None:
    handlers = load_module("waiting_handlers", FIXTURES)
    cid = tc.call.call_id
    started = handlers.RUNNING.setdefault(cid, asyncio.Event())
    release = handlers.RELEASE.setdefault(cid, asyncio.Event())
    tc.reply(call("held_lookup"), say("I found your record."))
    tc.controller.begin_turn("t-lookup")
    running = tc.session.run(user_input="Can you find my record?")
    await asyncio.wait_for(started.wait(), TIMEOUT_S)  # the handler runs in the worker
    asked_at = tc.controller.state.now
    tc.controller.on_turn("user", "Take your time.")  # the caller, while it runs
    spoke_at = tc.controller.state.now
    assert spoke_at > asked_at
    release.set()
    result = await asyncio.wait_for(running, TIMEOUT_S)
    result.expect.next_event().is_function_call(name="held_lookup")
    out = result.expect.next_event().is_function_call_output()
    assert "found" in out.event().item.output
    mine = tc.controller.state
    assert mine.state.get("record") == "found"  # the function's step is taken
    assert mine.now == spoke_at  # and the caller's turn was not taken back by the answer
    st = await tc.synced()  # the turn reached the workflow, which applied it after the answer
    assert st.node == "welcome" and st.pending_functions == 0
    theirs = await tc.call.handle.query("call_state", result_type=CallState)
    assert theirs == mine
    transcript = [t.text for t in await tc.call.transcript()]
    assert "Take your time." in transcript
