"""A flow's ``voice:`` settings on a live ``AgentSession`` attached to a real CallWorkflow:
the flow's settings are in force from the first node, a node's own replace them as the call
moves (livekit's own view of the session: ``AgentActivity``'s models and the session's
options), a list of TTS or STT providers is livekit's ``FallbackAdapter`` over them in
order, a node that names nothing gets the session's own back, and an agent that takes over
applies the node it resumes on. The models are the simulator's offline ones, real
livekit objects (espeak-ng, pocketsphinx, the scripted LLM with the flow's temperature);
the agent's and the workflow's states stay equal throughout."""

from __future__ import annotations

import logging
import shutil
from typing import Any

import pytest
from livekit.agents import inference
from livekit.agents import stt as lk_stt
from livekit.agents import tts as lk_tts
from temporalio.client import Client

from ringflow.agents.voice_providers import ProviderStack
from ringflow.callflow.loader import validate_data
from ringflow.callflow.model import FlowDefinition
from ringflow.simulation.audio.espeak import EspeakTTS
from ringflow.simulation.audio.sphinx import SphinxSTT
from ringflow.simulation.scripted_llm import ScriptedLLM
from ringflow.simulation.voice_stack import SimulatedStack
from tests.support.agentkit import TextCall, call, text_call
from tests.support.wfkit import running_worker

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        shutil.which("espeak-ng") is None,
        reason="needs Debian's espeak-ng, the offline TTS (.ci/run installs it)",
    ),
]


def voiced_flow() -> FlowDefinition:
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
            "flow": "voiced",
            "voice": {
                "tts": [
                    {"provider": "cartesia", "model": "sonic-2"},
                    {"provider": "openai", "voice": "nova"},
                ],
                "stt": {"provider": "deepgram", "model": "nova-3", "keywords": ["Ringflow", "Ava"]},
                "llm": {"temperature": 0.3},
                "endpointing": {"min_delay_s": 0.6, "max_delay_s": 2.0},
                "interruption": {"min_duration_s": 0.8, "min_words": 2},
            },
            "nodes": {
                "a": node("b"),
                "b": node(
                    "c",
                    voice={
                        "tts": {"provider": "openai"},
                        "stt": [
                            {"provider": "openai"},
                            {"provider": "assemblyai", "model": "universal-streaming"},
                        ],
                        "llm": {"temperature": 0.9},
                        "turn_detection": "vad",
                        "endpointing": {"min_delay_s": 0.2},
                        "interruption": {"min_words": 0},
                    },
                ),
                "c": node("done"),
                "done": {"type": "end", "task": "Bye."},
            },
        },
        source="voiced.yaml",
    )
    assert report.definition is not None, report.errors
    return report.definition


def offline(tc: TextCall) -> SimulatedStack:
    return SimulatedStack(lambda choice: tc.scripted_model(temperature=choice.temperature), audio=True)


async def agree(tc: TextCall) -> None:
    """The workflow, once it applied what the agent sent, holds the agent's state."""
    await tc.synced()
    ctrl = tc.controller
    held = await tc.call.settle(ctrl.agent_id, after_seq=ctrl.state.seq, epoch=ctrl.epoch)
    assert held.model_dump() == ctrl.state.model_dump()


async def test_each_nodes_voice_reaches_the_live_session_and_a_takeover_applies_it_again(
    temporal_client: Client, task_queue: str, sqlite_url: str, llm: ScriptedLLM
) -> None:
    async with (
        running_worker(temporal_client, task_queue, sqlite_url),
        text_call(temporal_client, task_queue, llm, definition=voiced_flow(), voice=offline) as tc,
    ):
        session, activity = tc.session, tc.session._activity  # livekit's resolved view
        assert activity is not None
        default_td = session.turn_detection
        control = tc.controller.port.voice  # type: ignore[union-attr]
        assert control is not None
        default_end = control.default_endpointing  # the session's own, before the flow's

        # node a: the flow's settings, from the first turn
        tts_a, stt_a, llm_a = activity.tts, activity.stt, activity.llm
        assert isinstance(tts_a, lk_tts.FallbackAdapter)
        assert [type(t) for t in tts_a._tts_instances] == [EspeakTTS, EspeakTTS]  # two, in order
        assert isinstance(stt_a, SphinxSTT)
        assert llm_a._opts.temperature == 0.3
        assert (
            session.options.endpointing["min_delay"] == 0.6
            and session.options.endpointing["max_delay"] == 2.0
        )
        assert session.options.interruption["min_duration"] == 0.8
        assert session.options.interruption["min_words"] == 2
        assert set(session.keyterms) >= {"Ringflow", "Ava"}
        await agree(tc)

        # node b: its own settings over the flow's
        tc.reply(call("next"))
        await tc.user("go on")
        assert tc.controller.node == "b"
        assert isinstance(activity.tts, EspeakTTS) and activity.tts is not tts_a
        assert isinstance(activity.stt, lk_stt.FallbackAdapter) and len(activity.stt._stt_instances) == 2
        assert activity.llm._opts.temperature == 0.9
        assert tc.run.agent.turn_detection == "vad"
        assert session.options.endpointing["min_delay"] == 0.2
        assert session.options.endpointing["max_delay"] == 2.0  # the flow's, b names only min_delay_s
        assert session.options.interruption["min_words"] == 0
        assert session.options.interruption["min_duration"] == 0.8  # the flow's: b names only min_words
        await agree(tc)
        # the next reply is generated with b's model: its temperature is in the request
        tc.reply(call("next"))
        await tc.user("next please")
        assert tc.chats()[-1].body.get("temperature") == 0.9

        # node c names nothing of its own: the flow's settings again, the same models reused
        assert tc.controller.node == "c"
        assert activity.tts is tts_a and activity.stt is stt_a
        assert tc.run.agent.turn_detection is default_td or isinstance(
            tc.run.agent.turn_detection, inference.TurnDetector
        )
        assert session.options.endpointing["min_delay"] == 0.6
        assert session.options.interruption["min_words"] == 2
        await agree(tc)

        # an agent that takes over on c applies the flow's settings on its own new session
        await tc.run.kill()
        await tc.attach()
        fresh = tc.session._activity
        assert fresh is not None and fresh is not activity
        assert isinstance(fresh.tts, lk_tts.FallbackAdapter) and isinstance(fresh.stt, SphinxSTT)
        assert fresh.llm._opts.temperature == 0.3
        assert tc.session.options.endpointing["min_delay"] == 0.6
        assert default_end["min_delay"] != 0.6 and default_end["max_delay"] != 2.0  # (they did change it)
        await agree(tc)
        tc.reply(call("next"))
        await tc.user("bye now")
        record = await tc.ended()
        assert record.path == ["a", "b", "c", "done"]


def test_telephony_noise_cancellation_is_applied_only_where_livekit_cloud_s_plugin_is(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """livekit-plugins-noise-cancellation is LiveKit Cloud's and not installed here: the room
    input gets no filter, and the agent says so in one line; a flow that asks for none is quiet."""
    import importlib.util

    assert importlib.util.find_spec("livekit.plugins.noise_cancellation") is None
    stack = ProviderStack("gpt-4.1-mini")
    with caplog.at_level(logging.WARNING, logger="ringflow.agents.voice_providers"):
        assert stack.room_options("none") is None
        assert caplog.records == []
        assert stack.room_options("telephony") is None
    [line] = caplog.records
    assert getattr(line, "event", None) == "noise_cancellation_missing"
    assert "LiveKit Cloud" in line.getMessage()
