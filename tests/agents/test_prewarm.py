"""The agent's prewarm: plugins and the VAD are loaded once per job process, not per call."""

from __future__ import annotations

import gc
from types import SimpleNamespace
from typing import Any

from ringflow.agents.livekit_api import parse_job_metadata
from ringflow.callflow.state import CallState
from ringflow.contract.updates import Snapshot
from ringflow.servers.agent import aec_warmup_s, build_server, load_turn_detector, make_session, prewarm
from ringflow.settings import Settings
from tests.support.wfkit import clinic


def snapshot() -> Snapshot:
    definition = clinic()
    return Snapshot(
        call_id="c1",
        node=None,
        prompt=None,
        tools=[],
        state=CallState(),
        transcript_tail=[],
        ended=False,
        next_seq=1,
        definition=definition,
    )


async def test_the_server_prewarms_and_a_session_uses_the_prewarmed_vad(monkeypatch: Any) -> None:
    monkeypatch.setenv("RINGFLOW_VAD", "silero")
    settings = Settings(livekit_url="ws://127.0.0.1:7880", livekit_api_key="k", livekit_api_secret="s" * 32)
    assert build_server(settings).setup_fnc is prewarm
    proc = SimpleNamespace(userdata={})
    try:
        prewarm(proc)  # type: ignore[arg-type]
        # the heap prewarm left is frozen: full collections mid-call do not walk it
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()  # this test process goes on to other tests
    vad = proc.userdata["vad"]
    session = make_session(settings, snapshot(), vad)
    assert session.vad is vad  # the call did not load a VAD of its own


async def test_prewarm_loads_the_end_of_turn_model_from_the_wheel(monkeypatch: Any) -> None:
    # async: an AgentSession takes the running loop (a sync test found none once an earlier
    # test had closed the main thread's)
    """The turn detector livekit gives every session by default runs locally
    (``turn-detector-v1-mini``, no hub download); prewarm has loaded its weights."""
    monkeypatch.delenv("LIVEKIT_INFERENCE_URL", raising=False)
    load_turn_detector()
    session = make_session(Settings(), snapshot())
    assert getattr(session.turn_detection, "model", None) == "turn-detector-v1-mini"


def test_a_phone_call_has_no_echo_cancellation_warm_up() -> None:
    """A phone line has no loudspeaker feeding the caller's microphone: the caller may talk
    over the greeting from its first word (tests/ringflow/test_audio_calls.py hears it)."""
    assert aec_warmup_s(phone=True) is None
    assert aec_warmup_s(phone=False) == 3.0  # browser and app calls keep livekit's default


def test_a_dialed_call_job_names_the_participant_to_wait_for() -> None:
    info = parse_job_metadata('{"call_id": "c1", "resume": false, "wait_for": "sip-c1"}')
    assert (info.call_id, info.resume, info.wait_for) == ("c1", False, "sip-c1")


async def test_a_dialed_call_s_agent_waits_for_the_answer_not_the_ringing() -> None:
    """LiveKit puts the callee in the room while the phone rings; the agent greets on the answer."""
    import asyncio

    from livekit import rtc

    from ringflow.servers.agent import picked_up

    room: Any = rtc.EventEmitter()
    ringing = SimpleNamespace(identity="sip-c1", attributes={"sip.callStatus": "dialing"})
    answered = asyncio.ensure_future(picked_up(room, ringing))  # type: ignore[arg-type]
    await asyncio.sleep(0)
    assert not answered.done()
    room.emit(
        "participant_attributes_changed",
        {},
        SimpleNamespace(identity="other", attributes={"sip.callStatus": "active"}),
    )
    await asyncio.sleep(0)
    assert not answered.done()  # someone else's status
    room.emit(
        "participant_attributes_changed",
        {"sip.callStatus": "active"},
        SimpleNamespace(identity="sip-c1", attributes={"sip.callStatus": "active"}),
    )
    assert await asyncio.wait_for(answered, 5) is True
    busy = asyncio.ensure_future(picked_up(room, ringing))  # type: ignore[arg-type]
    await asyncio.sleep(0)
    room.emit("participant_disconnected", SimpleNamespace(identity="sip-c1", attributes={}))
    assert await asyncio.wait_for(busy, 5) is False
    already = SimpleNamespace(identity="sip-c2", attributes={"sip.callStatus": "active"})
    assert await picked_up(room, already) is True  # type: ignore[arg-type]
