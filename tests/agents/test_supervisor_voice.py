"""A supervisor who took a call over speaks on their own microphone track, and what they say
lands in the call's transcript as ``supervisor`` turns, in order with the caller's ``user``
turns, on real audio offline.

The agent is production's (``attach_agent``, ``agents/supervisor_voice.py``) on the audio
simulator's offline stack: livekit's VAD, pocketsphinx (held to the script's lines), espeak-ng.
The caller speaks into the session's microphone; the supervisor (a participant marked
``ringflow.role=supervisor`` in the simulator's stand-in room, ``SimulatedRoom``) into a
real livekit audio track, which the agent reads through the session's own STT. The workflow
is a real ``CallWorkflow`` on the dev server; the takeover and the hand-back are its
``supervise`` updates.
"""

from __future__ import annotations

import shutil
import uuid
from typing import Any

import pytest
from livekit.plugins import openai as lk_openai
from temporalio.client import Client

from ringflow.agents.runner import attach_agent
from ringflow.agents.supervisor_voice import watch_supervisors
from ringflow.callflow.loader import validate_data
from ringflow.contract.supervision import SupervisorRequest
from ringflow.settings import get_settings
from ringflow.simulation.audio.background import SimulatedRoom
from ringflow.simulation.audio.line import AudioLine
from ringflow.simulation.audio.sphinx import words_of
from ringflow.simulation.audio.stack import audio_session, caller_voice, warm
from ringflow.simulation.audio.supervisor_mic import SupervisorMic
from ringflow.simulation.scripted_llm import LANE_HEADER, ScriptedLLM
from ringflow.simulation.supervisor import agreement
from ringflow.workflows.client import CallHandle, start_call
from tests.support.agentkit import text_call
from tests.support.wfkit import running_worker, wait_until

on_audio = [
    pytest.mark.audio,
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        shutil.which("espeak-ng") is None,
        reason="needs Debian's espeak-ng, the agent's voice (.ci/run installs it)",
    ),
]
HEARD_S = 90.0  # a bound for a hung test: each line is heard within seconds

CALLER = ["I want to cancel my order", "the order number is seven"]
SUPERVISOR = ["hello this is the manager speaking", "I can cancel that for you now"]


def desk() -> Any:
    report = validate_data(
        {
            "flow": "desk",
            "nodes": {
                "help": {
                    "task": "Help the caller.",
                    "respond_immediately": False,
                    "functions": [
                        {
                            "name": "done",
                            "transition_only": True,
                            "description": "Done.",
                            "transition_to": "bye",
                        }
                    ],
                },
                "bye": {"type": "end", "task": "Bye."},
            },
        },
        source="desk.yaml",
    )
    assert report.definition is not None, report.errors
    return report.definition


async def spoken(call: CallHandle, run: Any, roles: tuple[str, ...]) -> list[tuple[str, str]]:
    """The call's turns of ``roles`` as the workflow holds them, once everything the agent
    queued has been delivered."""
    await run.outbox.flush(timeout=HEARD_S)
    return [(t.role, t.text) for t in await call.transcript() if t.role in roles]


@on_audio[0]
@on_audio[1]
@on_audio[2]
async def test_a_supervisors_speech_is_transcribed_as_supervisor_turns_in_order_with_the_callers(
    temporal_client: Client, task_queue: str, sqlite_url: str, llm: ScriptedLLM
) -> None:
    warm()
    voice = caller_voice(get_settings().data_dir)
    call_id = f"sup-{uuid.uuid4().hex[:10]}"
    llm.lane(call_id)
    lines: list[AudioLine] = []

    def session_factory(_snap: Any) -> Any:
        model = lk_openai.LLM(
            model="scripted", base_url=llm.base_url, api_key="scripted", extra_headers={LANE_HEADER: call_id}
        )
        session, line = audio_session(model, phrases=CALLER + SUPERVISOR, idle_s=120)
        lines.append(line)
        return session

    room = SimulatedRoom()
    sup = SupervisorMic("sup-ann")
    roles = ("user", "supervisor")
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start_call(temporal_client, desk(), task_queue=task_queue, call_id=call_id, variables={})
        run = await attach_agent(
            temporal_client,
            call_id,
            "agent-sup",
            session_factory=session_factory,
            idle_from_session=False,
            heartbeat_s=0,
            own_max_duration=False,
            supervisor_poll_s=0,  # read when the test says (and when the supervisor speaks)
        )
        try:
            assert run.supervisor_voice is not None
            watch_supervisors(room, run.supervisor_voice)
            sup.start()
            room.join(sup)  # a supervisor with a takeover's token, their microphone subscribed
            await call.supervise(SupervisorRequest(action="takeover", by="ann"))
            assert run.supervisors is not None
            await run.supervisors.poll()
            assert run.controller.state.takeover
            line = lines[-1]
            said: list[tuple[str, str]] = []
            for role, text in [
                ("user", CALLER[0]),
                ("supervisor", SUPERVISOR[0]),
                ("user", CALLER[1]),
                ("supervisor", SUPERVISOR[1]),
            ]:
                pcm = voice.speak(text)
                (line.mic.play if role == "user" else sup.say)(pcm)
                said.append((role, " ".join(words_of(text))))  # as the recognizer writes it

                async def heard(n: int = len(said)) -> list[tuple[str, str]] | None:
                    got = await spoken(call, run, roles)
                    return got if len(got) >= n else None

                await wait_until(heard, HEARD_S, f"{role} turn {text!r} in the transcript")
            assert await spoken(call, run, roles) == said  # the same words, in the order said
            await call.supervise(SupervisorRequest(action="handback", by="ann"))
            await run.supervisors.poll()
            assert not run.controller.state.takeover
            sup.say(voice.speak(SUPERVISOR[0]))  # after the hand-back: not the call's
            voice_of = run.supervisor_voice

            async def dropped() -> bool:
                return voice_of.dropped == 1

            await wait_until(dropped, HEARD_S, "the line after the hand-back heard")
            assert await spoken(call, run, ("supervisor",)) == [t for t in said if t[0] == "supervisor"]
        finally:
            await sup.aclose()
            for a_line in lines:
                await a_line.close()
            await run.kill()
            await call.handle.terminate("test over")


async def test_a_supervisor_heard_before_the_agent_read_the_takeover_is_kept_and_after_the_handback_dropped(
    temporal_client: Client, task_queue: str, sqlite_url: str, llm: ScriptedLLM
) -> None:
    async with (
        running_worker(temporal_client, task_queue, sqlite_url),
        text_call(temporal_client, task_queue, llm, definition=desk(), agent={"supervisor_poll_s": 0}) as tc,
    ):
        voice, feed = tc.run.supervisor_voice, tc.run.supervisors
        assert voice is not None and feed is not None
        await tc.call.supervise(SupervisorRequest(action="takeover", by="ann"))
        assert not tc.controller.state.takeover  # the agent has not read it yet
        await voice.heard("hello this is the manager speaking")  # it reads it at once
        assert tc.controller.state.takeover
        await tc.call.supervise(SupervisorRequest(action="handback", by="ann"))
        await feed.poll()
        await voice.heard("still here")  # the bot has the call again: not the call's
        assert voice.dropped == 1
        assert await agreement(tc.run) is None  # the agent's engine and the workflow's agree
        turns = [(t.role, t.text) for t in await tc.call.transcript() if t.role == "supervisor"]
        assert turns == [("supervisor", "hello this is the manager speaking")]
        said = [
            str(m.text_content)
            for m in tc.run.agent.chat_ctx.items
            if getattr(m, "role", None) == "assistant"
        ]
        assert [t for t in said if "hello this is the manager speaking" in t], said  # in the bot's context
