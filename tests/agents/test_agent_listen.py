"""The agent's listen modes on a live (text-mode) ``AgentSession`` attached to a real
CallWorkflow: each node's mode reaches livekit's own turn handling as the call moves, and
a push-to-talk press released with nothing said is an empty input the workflow counts.
The LLM is the scripted OpenAI-compatible endpoint (the only fake)."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import Client

from ringflow.callflow.loader import validate_data
from ringflow.callflow.model import FlowDefinition
from ringflow.simulation.scripted_llm import ScriptedLLM
from tests.support.agentkit import TIMEOUT_S, call, text_call
from tests.support.wfkit import running_worker

pytestmark = pytest.mark.timeout(300)


def three_modes() -> FlowDefinition:
    def node(to: str, listen: str | None) -> dict[str, object]:
        out: dict[str, object] = {
            "task": "Help.",
            "respond_immediately": False,
            "functions": [
                {"name": "next", "transition_only": True, "description": "Move on.", "transition_to": to},
                {"name": "bye", "transition_only": True, "description": "Done.", "transition_to": "done"},
            ],
        }
        return {**out, "listen": listen} if listen else out

    report = validate_data(
        {
            "flow": "modes",
            "settings": {"idle": {"on_give_up": "wait", "prompts": 1}},
            "nodes": {
                "a": node("b", None),
                "b": node("c", "manual"),
                "c": node("a", "realtime"),
                "done": {"type": "end", "task": "Bye."},
            },
        },
        source="modes.yaml",
    )
    assert report.definition is not None, report.errors
    return report.definition


async def test_each_nodes_listen_mode_reaches_livekit_and_an_empty_press_is_counted(
    temporal_client: Client, task_queue: str, sqlite_url: str, llm: ScriptedLLM
) -> None:
    async with (
        running_worker(temporal_client, task_queue, sqlite_url),
        text_call(temporal_client, task_queue, llm, definition=three_modes()) as tc,
    ):
        agent, activity = tc.run.agent, tc.session._activity  # livekit's merged view of the options

        def mode() -> tuple[object, bool, bool]:
            opts = activity.preemptive_generation_opts
            return agent.turn_detection, opts["enabled"], opts.get("preemptive_tts", False)

        default = mode()
        assert getattr(agent, "listen_mode", "auto") == "auto"
        tc.reply(call("next"))  # the next node waits for the caller: no reply after it
        await tc.user("go on")
        assert tc.controller.node == "b" and agent.listen_mode == "manual"
        assert mode()[0] == "manual" and mode()[1] is False  # push-to-talk: nothing preempted
        # a press released with nothing said: an empty turn, counted by the agent and the workflow
        assert await asyncio.wait_for(tc.run.talk.handle("start"), TIMEOUT_S) == "listening"
        assert await asyncio.wait_for(tc.run.talk.handle("end"), TIMEOUT_S) == "empty"
        await tc.idle()
        assert tc.controller.state.idle_count == 1
        assert any("without saying anything" in str(m.get("content")) for m in tc.chats()[-1].messages)
        assert await asyncio.wait_for(tc.run.talk.handle("end"), TIMEOUT_S) == "empty"  # given up:
        await tc.idle()
        assert (
            len([r for r in tc.chats() if any("empty input" in str(m.get("content")) for m in r.messages)])
            == 1
        )  # no second prompt
        assert not tc.controller.ended and (await tc.synced()).status == "live"  # waits, quietly
        assert (await tc.synced()).rejected == []
        # a new agent starts from the workflow's state: it counted both empty presses, and the
        # node's push-to-talk is back on the new session
        await tc.run.kill()
        await tc.attach()
        agent, activity = tc.run.agent, tc.session._activity
        assert tc.controller.state.idle_count == 2 and agent.listen_mode == "manual"
        assert mode()[0] == "manual"
        tc.reply(call("next"))
        await tc.user("next please")
        assert tc.controller.node == "c" and agent.listen_mode == "realtime"  # LLM and TTS start early
        assert mode()[1:] == (True, True) and mode()[0] is tc.session.turn_detection
        assert await tc.run.talk.handle("start") == "ignored: this node does not listen push-to-talk"
        tc.reply(call("next"))
        await tc.user("again")
        assert tc.controller.node == "a"
        assert mode() == (tc.session.turn_detection, default[1], default[2])  # the session's again


async def test_speech_counts_as_empty_only_when_no_words_came_and_never_on_push_to_talk(
    temporal_client: Client, task_queue: str, sqlite_url: str, llm: ScriptedLLM
) -> None:
    """The watch livekit's user states feed (``speaking`` then ``listening``): a turn with
    words in between is no empty input; none is one (``empty_transcript``); on a
    push-to-talk node the client's ``end`` decides, not the watch. No grace to wait here:
    the order of events is what is under test."""
    async with (
        running_worker(temporal_client, task_queue, sqlite_url),
        text_call(temporal_client, task_queue, llm, definition=three_modes()) as tc,
    ):
        watch = tc.run.empty_speech
        assert watch is not None
        watch.grace_s = 0
        watch.user_state("speaking")
        tc.reply()  # the scripted model answers the words with a filler
        await tc.user("Hello there.")
        watch.user_state("listening")
        if watch.timer is not None:
            await asyncio.wait_for(watch.timer, TIMEOUT_S)
        await tc.idle()
        assert tc.controller.state.idle_count == 0
        watch.user_state("speaking")
        watch.user_state("listening")
        assert watch.timer is not None
        await asyncio.wait_for(watch.timer, TIMEOUT_S)
        await tc.idle()
        assert tc.controller.state.idle_count == 1
        assert any("no words could be made out" in str(m.get("content")) for m in tc.chats()[-1].messages)
        tc.reply(call("next"))
        await tc.user("Next.")
        assert tc.controller.node == "b" and tc.controller.state.idle_count == 0
        watch.user_state("speaking")
        watch.user_state("listening")
        assert watch.timer is None and tc.controller.state.idle_count == 0


async def test_a_committed_turn_without_words_gets_no_reply_of_its_own(
    temporal_client: Client, task_queue: str, sqlite_url: str, llm: ScriptedLLM
) -> None:
    """livekit asks the agent before answering a committed turn: one with no words (a
    push-to-talk press released in silence) is stopped there, so the idle prompt is the
    only reply; a turn with words goes on to the LLM."""
    from livekit.agents import StopResponse
    from livekit.agents import llm as lk_llm

    async with (
        running_worker(temporal_client, task_queue, sqlite_url),
        text_call(temporal_client, task_queue, llm, definition=three_modes()) as tc,
    ):
        agent, ctx = tc.run.agent, lk_llm.ChatContext.empty()
        with pytest.raises(StopResponse):
            await agent.on_user_turn_completed(ctx, lk_llm.ChatMessage(role="user", content=["  "]))
        await agent.on_user_turn_completed(ctx, lk_llm.ChatMessage(role="user", content=["Morgan Lee."]))
