"""The agent's prewarm: plugins and the VAD are loaded once per job process, not per call."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from ringflow.agents.livekit_api import parse_job_metadata
from ringflow.callflow.state import CallState
from ringflow.contract.updates import Snapshot
from ringflow.servers.agent import build_server, make_session, prewarm
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
    prewarm(proc)  # type: ignore[arg-type]
    vad = proc.userdata["vad"]
    session = make_session(settings, snapshot(), vad)
    assert session.vad is vad  # the call did not load a VAD of its own


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
