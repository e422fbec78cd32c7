"""``ringflow call simulate --audio``: calls on real speech through livekit's audio pipeline.

Each test is one call in real time: the caller's lines spoken by piper into a microphone of
20 ms frames, livekit's VAD and end-of-turn model, pocketsphinx, the scripted LLM (the only
fake, at its HTTP boundary), espeak-ng into a loudspeaker that plays in real time. They
assert what happened and in what order, never how many milliseconds it took (that is
``bench/voice.py``). Each test is independent (its own worker and call), so xdist spreads
them over its workers.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from ringflow.devstack import DevStack
from ringflow.simulation.audio.stack import warm
from ringflow.simulation.simulator import SimulationResult, environment, run_script
from tests.support.paths import TESTS

AUDIO = TESTS / "fixtures" / "audio"
pytestmark = [
    pytest.mark.audio,
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        shutil.which("espeak-ng") is None,
        reason="needs Debian's espeak-ng, the agent's voice (.ci/run installs it)",
    ),
]


@pytest.fixture(scope="module")
async def audio_env(temporal_server: DevStack) -> AsyncIterator[tuple[Any, str, Any]]:
    warm()
    async with environment(temporal_server.address) as (client, task_queue, llm, _):
        yield client, task_queue, llm


async def call(env: tuple[Any, str, Any], name: str, **kw: Any) -> SimulationResult:
    client, task_queue, llm = env
    result = await run_script(Path(AUDIO / f"{name}.yaml"), client, task_queue, llm, audio=True, **kw)
    assert result.error is None, result.error
    return result


def user_turns(result: SimulationResult) -> list[str]:
    return [str(t["text"]) for t in result.transcript if t["role"] == "user"]


async def test_a_barge_in_stops_the_agent_on_a_node_that_allows_it(audio_env: Any) -> None:
    result = await call(audio_env, "barge_in")
    assert result.ok, result.failures
    over = result.timings[1]
    assert over["heard"] == "actually wait"
    assert over["interrupted"] is True  # the reply was cut where the caller spoke
    assert 0 < over["barge_in_stop_ms"] < 5000  # loose: it stopped while the caller spoke, not after
    assert result.voice is not None and result.voice["ran"]["stt"] == "pocketsphinx"


async def test_transition_speech_and_an_uninterruptible_node_are_not_cut(audio_env: Any) -> None:
    result = await call(audio_env, "no_barge_in")
    assert result.ok, result.failures  # the transition speech and the node's reply said to their end
    over = result.timings[1]
    assert over["interrupted"] is False
    assert over["heard"] is None  # muted while the bot speaks: the words went nowhere
    assert "hello" not in " ".join(user_turns(result))


async def test_a_false_interruption_resumes_the_agent(audio_env: Any) -> None:
    result = await call(audio_env, "false_interruption")
    assert result.ok, result.failures
    burst = result.timings[1]
    assert burst["paused"] is True, result.timings  # the burst was heard as speech: the agent paused
    assert burst["false_interruption"] is True  # no words came: livekit resumed the agent
    assert burst["interrupted"] is False
    heard = user_turns(result)
    assert heard[0] == "when is breakfast served"
    assert set(heard) <= {"when is breakfast served", "thank you that is all"}  # the burst: no turn


async def test_idle_prompts_fire_on_real_silence(audio_env: Any) -> None:
    result = await call(audio_env, "idle")
    assert result.ok, result.failures
    assert result.end_reason == "user_idle"
    assert result.timings[1]["idle_prompts"] == 2  # one re-prompt, then the goodbye
    # each one came after the flow's idle.timeout_s (8 s) of quiet on the line, never
    # before it: the prompt from the reply's end, the goodbye from the prompt's end
    gaps = result.timings[1]["prompt_gaps_ms"]
    assert len(gaps) == 2
    assert all(gap >= 8000 for gap in gaps), gaps


async def test_a_kill_during_the_caller_s_speech_loses_no_turn(audio_env: Any) -> None:
    result = await call(audio_env, "kill", kill_at=0)
    assert result.kills == 1
    assert result.ok, result.failures
    assert user_turns(result) == ["i need a taxi to the airport please", "thank you that is all"]


async def test_an_inbound_caller_interrupting_the_greeting_is_heard(audio_env: Any) -> None:
    """No echo-cancellation warm-up on a phone line: livekit's default (3 s) would drop the
    caller's words over the first seconds of the greeting."""
    result = await call(audio_env, "greeting_barge_in", inbound=True)
    assert result.ok, result.failures
    first = result.timings[0]
    assert first["interrupted"] is True
    assert first["heard"] == "sorry is this the hotel"


async def test_a_flows_voice_settings_run_on_real_audio_and_say_what_production_would_use(
    audio_env: Any,
) -> None:
    """The flow's TTS is a failover list (a FallbackAdapter over two espeak-ng voices here):
    the caller is heard, the barge-in stops it, and the result names, per node, the providers
    production would have used."""
    result = await call(audio_env, "voiced_barge_in")
    assert result.ok, result.failures
    assert result.timings[1]["interrupted"] is True
    assert 0 < result.timings[1]["barge_in_stop_ms"] < 5000
    assert result.voice is not None and result.voice["ran"]["tts"] == "espeak-ng"
    by_node = result.voice["by_node"]
    assert [t["provider"] for t in by_node["welcome"]["tts"]] == ["cartesia", "openai"]
    assert by_node["welcome"]["stt"][0]["keywords"] == ["Grand Harbour"]
    assert by_node["done"]["tts"] == [{"provider": "openai", "voice": "alloy"}]
    assert by_node["done"]["endpointing"] == {"min_delay_s": 0.3, "max_delay_s": 2.0}  # the flow's
