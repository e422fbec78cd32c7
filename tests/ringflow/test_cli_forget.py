"""``ringflow call forget`` as a real process against real stores: after it, nothing of the
calls is left in the database, the S3-compatible store (moto's server), Redis, or
Temporal's histories and visibility records; and a live call is left alone."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid

import pytest
from redis.asyncio import Redis
from temporalio.client import Client

from ringflow.activities.persistence import load_call, load_transcript
from ringflow.agents.livekit_egress import LiveKitRecorder, StoreCredentials
from ringflow.callflow.model import FlowDefinition, RecordingSettings
from ringflow.contract.ids import call_workflow_id
from ringflow.contract.journal import journal_key
from ringflow.devstack import DevStack
from ringflow.simulation.livekit_fake import FakeLiveKit
from tests.support.paths import ROOT
from tests.support.s3kit import ACCESS_KEY, REGION, SECRET, S3Server
from tests.support.wfkit import Agent, clinic, running_worker, start, use_services, wait_state, wait_until

REDIS = "redis://127.0.0.1:6379/0"
PHONE = "+12125550177"


def recorded(store: str) -> FlowDefinition:
    base = clinic()
    flow = base.flow.model_copy(update={"recording": RecordingSettings(store=store)})
    return base.model_copy(update={"flow": flow})


async def forget(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ringflow.cli", "call", "forget", *args,
        env=env, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


@pytest.mark.timeout(240)
async def test_forget_by_phone_leaves_nothing_of_the_persons_calls_and_keeps_a_live_one(
    lk: FakeLiveKit,
    s3: S3Server,
    temporal_server: DevStack,
    temporal_client: Client,
    task_queue: str,
    sqlite_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bucket = f"forget-{uuid.uuid4().hex[:8]}"
    s3.client().create_bucket(Bucket=bucket)
    creds = StoreCredentials(ACCESS_KEY, SECRET, REGION, s3.endpoint, s3_force_path_style=True)
    use_services(monkeypatch, recorder=LiveKitRecorder(lk.url, lk.api_key, lk.api_secret, credentials=creds))
    redis = Redis.from_url(REDIS)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RINGFLOW_TEMPORAL_ADDRESS": temporal_server.address,
        "RINGFLOW_DATABASE_URL": sqlite_url,
        "RINGFLOW_REDIS_URL": REDIS,
        "RINGFLOW_RECORDING_S3_ACCESS_KEY": ACCESS_KEY,
        "RINGFLOW_RECORDING_S3_SECRET": SECRET,
        "RINGFLOW_RECORDING_S3_REGION": REGION,
        "RINGFLOW_RECORDING_S3_ENDPOINT": s3.endpoint,
        "RINGFLOW_RECORDING_S3_FORCE_PATH_STYLE": "true",
    }
    try:
        async with running_worker(temporal_client, task_queue, sqlite_url):
            ended = []
            for _ in range(2):  # two calls of the person, the first recorded
                definition = recorded(f"s3://{bucket}/calls/") if not ended else clinic()
                call = await start(temporal_client, task_queue, definition, variables={"patient": PHONE})
                lk.add_room(call.call_id, participants=("caller",))
                snap = await call.attach("agent-1")
                agent = Agent(call, epoch=snap.epoch, seq=snap.next_seq - 1)
                await agent.say(("user", f"It's {PHONE}, yes."))
                await wait_state(call, lambda s: s.turns == 1)
                await redis.xadd(journal_key(call.call_id), {"e": "{}", "t": "1"})
                await call.hangup("user_hangup")
                await call.handle.result()
                ended.append(call.call_id)
            live = await start(temporal_client, task_queue, variables={"patient": "Sam Roe"})
            assert s3.keys(bucket) == [f"calls/{ended[0]}.ogg"]

            code, out, err = await forget(env, "--phone", PHONE, "--json")
            assert code == 0, err
            done = {d["call_id"]: d for d in json.loads(out)}
            assert sorted(done) == sorted(ended)
            assert f"recording s3://{bucket}/calls/{ended[0]}.ogg" in done[ended[0]]["erased"]
            assert "recording" in done[ended[1]]["absent"]
            for d in done.values():
                assert "database record and transcript turns" in d["erased"] and "turn journal" in d["erased"]
                assert any(p.startswith("temporal workflow") for p in d["erased"]) and not d["not_erased"]

            code, out, _ = await forget(env, live.call_id, "--json")  # live: nothing is touched
            (kept,) = json.loads(out)
            assert code == 1 and "live" in kept["not_erased"]["everything"]
            assert (await live.state()).status == "dialing"
            await live.hangup("user_hangup")
            await live.handle.result()

        assert s3.keys(bucket) == []
        for call_id in ended:
            assert load_call(call_id, database_url=sqlite_url) is None
            assert load_transcript(call_id, database_url=sqlite_url) == []
            assert not await redis.exists(journal_key(call_id))

            async def gone(wid: str = call_workflow_id(call_id)) -> bool | None:
                found = [w async for w in temporal_client.list_workflows(f"WorkflowId = '{wid}'")]
                return True if not found else None

            await wait_until(gone, 60, "the visibility records deleted")
    finally:
        await redis.aclose()


async def test_forget_takes_a_call_id_or_a_phone() -> None:
    for args in ((), ("c1", "--phone", PHONE)):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "ringflow.cli", "call", "forget", *args,
            cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await proc.communicate()
        assert proc.returncode == 2 and b"give a CALL_ID or --phone NUMBER" in err
