"""A flow's ``background_audio`` as the caller hears it: livekit's ``BackgroundAudioPlayer``
driven by the agent's code (``agents/background_audio.py``), publishing its track on the
simulator's room (``simulation/audio/background.py``), heard through a livekit
``AudioStream`` on that track in real time.

The thinking sound is heard while the agent thinks (its LLM's answer held back by the
scripted LLM's gate) and stops once it answers; an ambient sound plays under the node and a
node's own settings replace the flow's on the transition; a flow without sounds publishes
no track at all. The sessions are real ``AgentSession`` objects attached to a real
``CallWorkflow`` (text mode: the background track is the only audio here), plus one call
on real audio through ``ringflow call simulate --audio``.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from temporalio.client import Client

from ringflow.agents.background_audio import CROSSFADE_S
from ringflow.callflow.loader import validate_data
from ringflow.callflow.model import FlowDefinition
from ringflow.devstack import DevStack
from ringflow.simulation.audio.background import BackgroundEar, SimulatedRoom
from ringflow.simulation.audio.stack import warm
from ringflow.simulation.scripted_llm import ScriptedLLM
from ringflow.simulation.simulator import environment, run_script
from ringflow.simulation.voice_stack import SimulatedStack
from tests.support.agentkit import TIMEOUT_S, TextCall, call, say, text_call
from tests.support.paths import TESTS
from tests.support.wfkit import running_worker

pytestmark = [pytest.mark.audio, pytest.mark.timeout(300)]
AUDIO = TESTS / "fixtures" / "audio"

HEAR_S = 0.5  # how long the caller listens for a sound
# After a sound stops, what was already queued still plays: livekit's audio source buffers
# 400 ms (background_audio._AUDIO_SOURCE_BUFFER_MS), its mixer a block of 100 ms.
TAIL_S = 1.2


def flow(voice: dict[str, Any] | None, b_voice: dict[str, Any] | None = None) -> FlowDefinition:
    def node(to: str, **extra: Any) -> dict[str, Any]:
        return {
            "task": "Help.",
            "respond_immediately": False,
            "functions": [
                {"name": "next", "transition_only": True, "description": "On.", "transition_to": to}
            ],
            **extra,
        }

    report = validate_data(
        {
            "flow": "sounds",
            **({"voice": voice} if voice is not None else {}),
            "nodes": {
                "a": node("b"),
                "b": node("done", **({"voice": b_voice} if b_voice is not None else {})),
                "done": {"type": "end", "task": "Bye."},
            },
        },
        source="sounds.yaml",
    )
    assert report.definition is not None, report.errors
    return report.definition


def stack_on(room: SimulatedRoom) -> Callable[[TextCall], SimulatedStack]:
    def build(tc: TextCall) -> SimulatedStack:
        return SimulatedStack(
            lambda choice: tc.scripted_model(temperature=choice.temperature),
            audio=False,
            room_of=lambda _session: room,
        )

    return build


async def state(tc: TextCall, wanted: str) -> float:
    """Wait until the agent is in ``wanted``; when it got there (this process's clock)."""
    reached = asyncio.Event()

    def changed(ev: Any) -> None:
        if ev.new_state == wanted:
            reached.set()

    tc.session.on("agent_state_changed", changed)
    try:
        if tc.session.agent_state != wanted:
            await asyncio.wait_for(reached.wait(), TIMEOUT_S)
        return time.perf_counter()
    finally:
        tc.session.off("agent_state_changed", changed)


async def frames_after(ear: BackgroundEar, at: float, seconds: float) -> None:
    """Until ``seconds`` of frames, loud or quiet, arrived after ``at``."""
    n = int(seconds / 0.01)
    await asyncio.wait_for(_count(ear, at, n), TIMEOUT_S)


async def _count(ear: BackgroundEar, at: float, n: int) -> None:
    while sum(1 for f in ear.frames if f.at >= at) < n:
        await ear.changed.wait()


async def thinking_turn(tc: TextCall, ear: BackgroundEar, text: str, *steps: dict[str, Any]) -> float:
    """A caller turn whose answer is held while the caller listens: returns how much sound
    they heard while the agent thought (it thinks at least ``HEAR_S`` plus the tail)."""
    gate = asyncio.Event()
    tc.lane.chat_gate = gate
    tc.reply(*steps)
    turn = asyncio.ensure_future(tc.user(text))
    thinking_at = await state(tc, "thinking")
    await frames_after(ear, thinking_at, HEAR_S + TAIL_S)  # the agent still thinks: held
    heard = ear.loud_s(thinking_at + TAIL_S, float("inf"))  # past the start's latency
    tc.lane.chat_gate = None
    gate.set()
    await asyncio.wait_for(turn, TIMEOUT_S)
    return heard


async def quiet_after(tc: TextCall, ear: BackgroundEar) -> float:
    """How much sound the caller hears once the agent has answered (after the tail)."""
    done_at = await state(tc, "listening")
    await frames_after(ear, done_at, TAIL_S + HEAR_S)
    return ear.loud_s(done_at + TAIL_S, float("inf"))


async def test_the_thinking_sound_plays_while_the_agent_thinks_and_stops_when_it_answers(
    temporal_client: Client, task_queue: str, sqlite_url: str, llm: ScriptedLLM
) -> None:
    room = SimulatedRoom()
    ear = room.ear
    definition = flow({"background_audio": {"thinking": "keyboard"}})
    async with (
        running_worker(temporal_client, task_queue, sqlite_url),
        text_call(temporal_client, task_queue, llm, definition=definition, voice=stack_on(room)) as tc,
    ):
        assert ear.tracks == 1  # the flow names a sound: the player's track is published
        heard = await thinking_turn(tc, ear, "What are your hours?", say("Nine to five."))
        assert heard >= HEAR_S / 2, f"{heard:.2f}s of thinking sound in {HEAR_S}s"  # typing has gaps
        assert await quiet_after(tc, ear) == 0.0  # stopped with the answer (no ambient here)


async def test_a_flow_without_sounds_publishes_no_track(
    temporal_client: Client, task_queue: str, sqlite_url: str, llm: ScriptedLLM
) -> None:
    room = SimulatedRoom()
    definition = flow({"llm": {"temperature": 0.2}})  # voice settings, but no sounds
    async with (
        running_worker(temporal_client, task_queue, sqlite_url),
        text_call(temporal_client, task_queue, llm, definition=definition, voice=stack_on(room)) as tc,
    ):
        tc.reply(say("Nine to five."))
        await tc.user("What are your hours?")
        assert room.ear.tracks == 0 and room.ear.frames == []


async def test_a_node_s_sounds_replace_the_flow_s_on_the_transition(
    temporal_client: Client, task_queue: str, sqlite_url: str, llm: ScriptedLLM
) -> None:
    """The flow's ambient sound is heard on node a; node b turns the volume to 0 and adds a
    thinking sound: on b the caller hears nothing, even while the agent thinks (volume 0),
    and the one track stays published across the transition."""
    room = SimulatedRoom()
    ear = room.ear
    definition = flow(
        {"background_audio": {"ambient": "office"}},
        b_voice={"background_audio": {"volume": 0, "thinking": "keyboard"}},
    )
    async with (
        running_worker(temporal_client, task_queue, sqlite_url),
        text_call(temporal_client, task_queue, llm, definition=definition, voice=stack_on(room)) as tc,
    ):
        start = time.perf_counter()
        await frames_after(ear, start, TAIL_S + HEAR_S)
        assert ear.loud_s(start + TAIL_S, float("inf")) >= HEAR_S / 2  # the office, on a
        tc.reply(call("next"))
        await tc.user("Go on.")
        assert tc.controller.node == "b"
        moved = time.perf_counter()
        heard = await thinking_turn(tc, ear, "Anything else?", say("No."))
        assert heard == 0.0, f"{heard:.2f}s heard on b (volume 0)"
        assert ear.loud_s(moved + TAIL_S + CROSSFADE_S, float("inf")) == 0.0  # the office faded out
        assert ear.tracks == 1


@pytest.fixture(scope="module")
async def audio_env(temporal_server: DevStack) -> AsyncIterator[tuple[Any, str, Any]]:
    warm()
    async with environment(temporal_server.address) as (client, task_queue, llm, _):
        yield client, task_queue, llm


@pytest.mark.skipif(
    shutil.which("espeak-ng") is None, reason="needs Debian's espeak-ng (.ci/run installs it)"
)
async def test_a_call_on_real_audio_plays_the_thinking_sound_while_the_agent_thinks(audio_env: Any) -> None:
    """``ringflow call simulate --audio`` on a flow with a thinking sound: in the first turn
    the caller hears typing while the agent thinks (the script's model takes a second, as
    a real one may, so the thinking is long enough to hear) and nothing else on the background track
    (no ambient there), the result says so per turn, and the report names what production
    plays on each node (the end node's ambient sound over the flow's thinking one)."""
    client, task_queue, llm = audio_env
    result = await run_script(AUDIO / "sounds.yaml", client, task_queue, llm, audio=True)
    assert result.error is None, result.error
    assert result.ok, result.failures
    first = result.timings[0]
    # the script's model takes 1 s over that answer, so the agent thinks at least that long
    # (typing has gaps, and the sound starts a little after the thinking)
    assert first["thinking_sound_s"] is not None and first["thinking_sound_s"] >= 0.5, result.timings
    assert first["background_s"] <= first["thinking_sound_s"] + 0.3, result.timings  # only while thinking
    assert result.voice is not None
    by_node = result.voice["by_node"]
    assert by_node["welcome"]["background_audio"] == {"thinking": "keyboard", "volume": 0.8}
    assert by_node["done"]["background_audio"] == {"thinking": "keyboard", "ambient": "office", "volume": 0.8}
