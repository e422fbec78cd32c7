"""Recording end to end: a real CallWorkflow on a real Temporal server orders the recording
activities, which reach the LiveKit protocol fake's Egress service through the real
livekit-api SDK (LiveKit is faked at its network boundary); the fake's egress writes a real
Ogg file into a real S3-compatible server (moto's server mode) or a local folder. Checked:
one egress per call whatever the retries (a lost reply, a worker SIGKILLed mid-start, an
agent replaced), stopped at each kind of end, the object in the
store with the duration the record gives, nothing recorded without consent, and a failing
egress never ending the call."""

from __future__ import annotations

import asyncio
import io
import signal
import uuid
from pathlib import Path
from typing import Any

import av
import pytest
from temporalio.client import Client

from ringflow.agents.livekit_egress import LiveKitRecorder, StoreCredentials
from ringflow.callflow.model import FlowDefinition, FlowSettings, RecordingConsent, RecordingSettings
from ringflow.contract.records import CallRecord
from ringflow.simulation.livekit_fake import FakeLiveKit
from ringflow.workflows.client import CallHandle
from tests.support.s3kit import ACCESS_KEY, REGION, SECRET, S3Server
from tests.support.wfkit import Agent, clinic, running_worker, start, use_services, wait_state
from tests.support.worker_process import NO_AGENT, Worker


@pytest.fixture
def bucket(s3: S3Server) -> str:
    name = f"rec-{uuid.uuid4().hex[:10]}"
    s3.client().create_bucket(Bucket=name)
    return name


@pytest.fixture
def lk(lk: FakeLiveKit, s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> FakeLiveKit:
    """The shared fake, with the recording activities' recorder pointed at it and the
    store's keys as a worker's settings would give them."""
    creds = StoreCredentials(
        s3_access_key=ACCESS_KEY,
        s3_secret=SECRET,
        s3_region=REGION,
        s3_endpoint=s3.endpoint,
        s3_force_path_style=True,
    )
    use_services(monkeypatch, recorder=LiveKitRecorder(lk.url, lk.api_key, lk.api_secret, credentials=creds))
    return lk


def recorded(store: str, **kw: object) -> FlowDefinition:
    base = clinic()
    flow = base.flow.model_copy(update={"recording": RecordingSettings(store=store, **kw)})  # type: ignore[arg-type]
    return base.model_copy(update={"flow": flow})


async def live_call(
    client: Client, task_queue: str, lk: FakeLiveKit, definition: FlowDefinition
) -> tuple[CallHandle, Agent]:
    call = await start(client, task_queue, definition)
    lk.add_room(call.call_id, participants=("caller",))  # the caller's room, as LiveKit holds it
    snap = await call.attach("agent-1")
    return call, Agent(call, epoch=snap.epoch, seq=snap.next_seq - 1)


def ogg_seconds(data: bytes) -> float:
    with av.open(io.BytesIO(data)) as f:
        assert f.duration is not None
        return float(f.duration) / 1e6


async def test_a_call_is_recorded_once_into_the_bucket_and_stopped_at_the_hangup(
    lk: FakeLiveKit, s3: S3Server, bucket: str, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    # The first start is carried out and its reply lost: the retry must find that egress.
    lk.lose_next_reply(method="StartRoomCompositeEgress")
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call, agent = await live_call(temporal_client, task_queue, lk, recorded(f"s3://{bucket}/calls/"))
        st = await wait_state(call, lambda s: s.recording is not None and s.recording.status == "active")
        assert st.recording is not None and st.recording.id in lk.egresses
        snap = await call.attach("agent-2")  # an agent replaced mid-call changes nothing
        agent = Agent(call, epoch=snap.epoch, seq=snap.next_seq - 1)
        await agent.say(("user", "Yes, speaking."))
        await wait_state(call, lambda s: s.turns == 1)
        await call.hangup("user_hangup")
        record: CallRecord = await call.handle.result()
    assert len(lk.egresses) == 1 and len(lk.calls("StartRoomCompositeEgress")) == 1
    (egress,) = lk.egresses.values()
    sent = egress.room_composite
    assert sent.audio_only and sent.room_name == call.call_id
    assert sent.file_outputs[0].s3.bucket == bucket and sent.file_outputs[0].s3.endpoint == s3.endpoint
    rec = record.recording
    assert rec is not None and rec.status == "completed" and rec.id == egress.egress_id
    key = f"calls/{call.call_id}.ogg"
    assert rec.location == f"s3://{bucket}/{key}"
    assert s3.keys(bucket) == [key]
    assert rec.duration_s is not None and abs(ogg_seconds(s3.read(bucket, key)) - rec.duration_s) < 0.1
    assert record.end_reason == "user_hangup"


@pytest.mark.parametrize("answer", ["confirmed", "wrong_person"])
async def test_a_flow_that_asks_records_only_after_consent(
    lk: FakeLiveKit, tmp_path: Path, temporal_client: Client, task_queue: str, sqlite_url: str, answer: str
) -> None:
    folder = tmp_path / "recordings"
    flow = recorded(
        f"file://{folder}",
        consent=RecordingConsent(say="This call may be recorded. Is that all right?"),
        record_after_consent="offer",
    )
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call, agent = await live_call(temporal_client, task_queue, lk, flow)
        await agent.transition("verify", answer)
        if answer == "confirmed":
            st = await wait_state(call, lambda s: s.recording is not None and s.recording.status == "active")
            assert st.node == "offer"
        await call.hangup("user_hangup")
        record = await call.handle.result()
    if answer == "wrong_person":  # declined: nothing asked of Egress, nothing written
        assert record.recording is None and not lk.calls("StartRoomCompositeEgress")
        assert not folder.exists()
        return
    rec = record.recording
    assert rec is not None and rec.status == "completed"
    path = folder / f"{call.call_id}.ogg"
    assert rec.location == path.as_uri() and path.is_file()
    assert rec.duration_s is not None and abs(ogg_seconds(path.read_bytes()) - rec.duration_s) < 0.1


async def test_the_recording_is_stopped_when_the_call_reaches_its_max_duration(
    lk: FakeLiveKit, s3: S3Server, bucket: str, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    base = recorded(f"s3://{bucket}/")
    flow = base.flow.model_copy(update={"settings": FlowSettings(max_duration_s=3)})
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call, _ = await live_call(temporal_client, task_queue, lk, base.model_copy(update={"flow": flow}))
        record = await call.handle.result()
    assert record.end_reason == "max_duration"
    assert record.recording is not None and record.recording.status == "completed"
    assert s3.keys(bucket) == [f"{call.call_id}.ogg"]


async def test_an_egress_refused_is_recorded_and_the_call_goes_on(
    lk: FakeLiveKit, bucket: str, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    lk.fail_next(1, 403, method="StartRoomCompositeEgress", msg="egress is not enabled")
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call, agent = await live_call(temporal_client, task_queue, lk, recorded(f"s3://{bucket}/"))
        st = await wait_state(call, lambda s: s.recording is not None and s.recording.status == "failed")
        assert st.status == "live" and any("recording:" in r.reason for r in st.rejected)
        await agent.transition("verify", "confirmed")  # the call goes on
        await wait_state(call, lambda s: s.node == "offer")
        await call.hangup("user_hangup")
        record = await call.handle.result()
    assert record.recording is not None and record.recording.status == "failed"
    assert "egress is not enabled" in (record.recording.error or "")
    assert record.end_reason == "user_hangup" and not lk.egresses


@pytest.mark.timeout(180)
async def test_a_worker_killed_while_the_egress_starts_leaves_one_recording(
    lk: FakeLiveKit, s3: S3Server, bucket: str, temporal_server: Any, temporal_client: Client,
    task_queue: str, sqlite_url: str, tmp_path: Path,
) -> None:  # fmt: skip
    """``ringflow worker`` processes with LiveKit's recorder: the first is SIGKILLed once
    LiveKit has started the egress and before the activity heard back; the attempt the
    next worker runs finds that egress instead of starting another."""
    started, gate = lk.hold_replies("StartRoomCompositeEgress")
    env = {
        "RINGFLOW_DISPATCHER": "livekit",
        "LIVEKIT_URL": lk.url,
        "LIVEKIT_API_KEY": lk.api_key,
        "LIVEKIT_API_SECRET": lk.api_secret,
        "RINGFLOW_RECORDING_S3_ACCESS_KEY": ACCESS_KEY,
        "RINGFLOW_RECORDING_S3_SECRET": SECRET,
        "RINGFLOW_RECORDING_S3_REGION": REGION,
        "RINGFLOW_RECORDING_S3_ENDPOINT": s3.endpoint,
        "RINGFLOW_RECORDING_S3_FORCE_PATH_STYLE": "true",
    }
    first = Worker(temporal_server.address, task_queue, sqlite_url, tmp_path / "w1.log", env=env)
    second: Worker | None = None
    try:
        await first.wait_ready()
        call = await start(temporal_client, task_queue, recorded(f"s3://{bucket}/"), agent_timeout_s=NO_AGENT)
        lk.add_room(call.call_id, participants=("caller",))
        await call.attach("agent-1")
        await asyncio.wait_for(started.wait(), 60)  # the egress runs; its reply is held
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(timeout=10)
        gate.set()
        second = Worker(temporal_server.address, task_queue, sqlite_url, tmp_path / "w2.log", env=env)
        await second.wait_ready()
        # the killed attempt times out (start_to_close 30 s), the retry finds the egress
        await wait_state(
            call, lambda s: s.recording is not None and s.recording.status == "active", timeout=90
        )
        await call.hangup("user_hangup")
        record = await asyncio.wait_for(call.handle.result(), 60)
    finally:
        first.stop()
        if second is not None:
            second.stop()
    assert len(lk.egresses) == 1 and len(lk.calls("StartRoomCompositeEgress")) <= 1
    assert record.recording is not None and record.recording.status == "completed"
    assert record.recording.id == next(iter(lk.egresses))
    assert s3.keys(bucket) == [f"{call.call_id}.ogg"]
