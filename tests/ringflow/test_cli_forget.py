"""``ringflow call forget`` as a real process against real stores: after it, nothing of the
calls is left in the database, the S3-compatible store (moto's server), Redis, or
Temporal's histories and visibility records; and a live call is left alone. By phone, it
reaches a call dialled to the number, the person's journeys and campaign contacts."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid

import pytest
from redis.asyncio import Redis
from temporalio.client import Client

from ringflow.activities.campaign_store import Contact, add_contacts, add_dnc, on_dnc, report
from ringflow.activities.persistence import load_call, load_transcript
from ringflow.agents.livekit_egress import LiveKitRecorder, StoreCredentials
from ringflow.callflow.model import FlowDefinition, RecordingSettings
from ringflow.contract.dial import Dial
from ringflow.contract.ids import call_workflow_id, journey_workflow_id
from ringflow.contract.journal import journal_key
from ringflow.contract.journey import JourneyView
from ringflow.devstack import DevStack
from ringflow.simulation.livekit_fake import FakeLiveKit
from ringflow.workflows.journey_client import JourneyHandle, start_journey
from tests.support.blobkit import AZURE_ACCOUNT, AZURE_KEY, AzureServer, GcsServer
from tests.support.campaignkit import fake_line
from tests.support.journeykit import journey_agent, journey_flow
from tests.support.paths import ROOT
from tests.support.s3kit import ACCESS_KEY, REGION, SECRET, S3Server
from tests.support.wfkit import Agent, clinic, running_worker, start, use_services, wait_state, wait_until

REDIS = "redis://127.0.0.1:6379/0"
PHONE = "+12125550177"


def recorded(store: str) -> FlowDefinition:
    base = clinic()
    flow = base.flow.model_copy(update={"recording": RecordingSettings(store=store)})
    return base.model_copy(update={"flow": flow})


def cli_env(temporal_server: DevStack, sqlite_url: str) -> dict[str, str]:
    """The environment of a ``ringflow`` process reading the test's Temporal and database."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RINGFLOW_TEMPORAL_ADDRESS": temporal_server.address,
        "RINGFLOW_DATABASE_URL": sqlite_url,
    }
    env.pop("RINGFLOW_REDIS_URL", None)
    return env


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
        **cli_env(temporal_server, sqlite_url),
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
            *calls, person = json.loads(out)
            assert person == {"phone": PHONE, "erased": [], "absent": ["campaign contacts", "journeys"],
                              "not_erased": {}, "kept": {}}  # fmt: skip
            done = {d["call_id"]: d for d in calls}
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


@pytest.mark.timeout(240)
async def test_forget_by_phone_reaches_a_dialled_call_the_persons_journey_and_campaign_contacts(
    temporal_server: DevStack,
    temporal_client: Client,
    task_queue: str,
    sqlite_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A call placed to the number (which no variable holds), a journey of the person and
    its call, and their campaign contacts: all forgotten, given the number as a person
    writes it; another person's contact and the do-not-call entry stay."""
    number = "+12125550188"
    other = "+12125550189"
    env = cli_env(temporal_server, sqlite_url)
    add_contacts(
        sqlite_url, "spring", [Contact(phone=number, tz="America/New_York", variables={"first_name": "Dana"})]
    )
    add_contacts(sqlite_url, "spring", [Contact(phone=other, tz="America/New_York")], start_idx=1)
    add_contacts(
        sqlite_url, "autumn", [Contact(phone=number, tz="America/New_York", variables={"first_name": "Dana"})]
    )
    async with (
        fake_line(monkeypatch) as lk,
        journey_agent(temporal_client, lk, ["done", "later"]),  # the journey's call asks for a follow-up
        running_worker(temporal_client, task_queue, sqlite_url),
    ):
        dialled = await start(
            temporal_client, task_queue, dial=Dial(to=number), variables={"patient": "Dana Roe"}
        )
        placed = await dialled.handle.result()
        assert placed.called_number == number and number not in json.dumps(placed.variables)
        j = await start_journey(
            temporal_client, journey_flow(), number, task_queue=task_queue, variables={"patient": "Dana"}
        )
        view = await wait_until(lambda: _journey_called(j), what="the journey's call summed up")
        (journey_call,) = [c.call_id for c in view.calls]
        assert load_call(journey_call, database_url=sqlite_url) is not None
        add_dnc(sqlite_url, [number], now=1.0)  # asked not to be called again (before, no call is placed)

        code, out, _ = await forget(env, "--phone", "+1 (212) 555-0188", "--json")  # the journey waits
        assert code == 1
        parts = json.loads(out)
        person = parts[-1]
        assert sorted(d["call_id"] for d in parts[:-1]) == sorted([dialled.call_id, journey_call])
        assert person["phone"] == "+1 (212) 555-0188"
        assert any(
            k.startswith(f"journey {journey_workflow_id('check_in', number)}") for k in person["not_erased"]
        )
        assert person["kept"] == {"do-not-call entry": "it is the person's objection to being called"}
        assert any(p.startswith("campaign contacts (2 in autumn, spring)") for p in person["erased"])

        await j.end()
        await j.result()
        code, out, err = await forget(env, "--phone", number, "--json")
        assert code == 0, (out, err)
        person = json.loads(out)[-1]
        assert person["erased"] == [
            f"journey {journey_workflow_id('check_in', number)} (1 run: history and visibility)"
        ]

    for call_id in (dialled.call_id, journey_call):
        assert load_call(call_id, database_url=sqlite_url) is None
    rows = report(sqlite_url, "spring") + report(sqlite_url, "autumn")
    assert number not in json.dumps(rows) and "Dana" not in json.dumps(rows)
    assert [(r["phone"], r["state"]) for r in rows] == [
        ("", "forgotten"),
        (other, "pending"),
        ("", "forgotten"),
    ]
    assert on_dnc(sqlite_url, number)

    async def gone() -> bool | None:
        ids = (
            call_workflow_id(dialled.call_id),
            call_workflow_id(journey_call),
            journey_workflow_id("check_in", number),
        )
        found = [
            w async for w in temporal_client.list_workflows(" OR ".join(f"WorkflowId = '{i}'" for i in ids))
        ]
        return True if not found else None

    await wait_until(gone, 60, "the calls' and the journey's visibility records deleted")

    code, _, err = await forget(env, "--phone", "+12125550100")
    assert code == 1 and "nothing stored of +12125550100" in err


async def _journey_called(j: JourneyHandle) -> JourneyView | None:
    view = await j.state()
    return view if view.status == "scheduled" and view.calls_total == 1 else None


@pytest.mark.timeout(240)
@pytest.mark.parametrize("scheme", ["gs", "azure"])
async def test_a_recording_egress_wrote_into_gcs_or_azure_is_deleted_by_forget(
    scheme: str,
    request: pytest.FixtureRequest,
    lk: FakeLiveKit,
    temporal_server: DevStack,
    temporal_client: Client,
    task_queue: str,
    sqlite_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fake's egress uploads with Google's or Azure's client into a real emulator of the
    store (gcp-storage-emulator, Azurite), as egress does into the cloud; ``call forget``
    deletes the object with the same clients and the worker's settings."""
    bucket = f"rec-{uuid.uuid4().hex[:8]}"
    env = cli_env(temporal_server, sqlite_url)
    store: GcsServer | AzureServer
    if scheme == "gs":
        store = request.getfixturevalue("gcs")
        store.client().create_bucket(bucket)
        lk.gcs_endpoint = store.endpoint
        creds = StoreCredentials()
        env["STORAGE_EMULATOR_HOST"] = store.endpoint
    else:
        store = request.getfixturevalue("azure")
        store.client().create_container(bucket)
        lk.azure_endpoint = store.endpoint
        creds = StoreCredentials(azure_account=AZURE_ACCOUNT, azure_key=AZURE_KEY)
        env["RINGFLOW_RECORDING_AZURE_ACCOUNT"] = AZURE_ACCOUNT
        env["RINGFLOW_RECORDING_AZURE_KEY"] = AZURE_KEY
        env["RINGFLOW_RECORDING_AZURE_ENDPOINT"] = store.endpoint
    use_services(monkeypatch, recorder=LiveKitRecorder(lk.url, lk.api_key, lk.api_secret, credentials=creds))
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue, recorded(f"{scheme}://{bucket}/calls/"))
        lk.add_room(call.call_id, participants=("caller",))
        snap = await call.attach("agent-1")
        await Agent(call, epoch=snap.epoch, seq=snap.next_seq - 1).say(("user", "Yes, speaking."))
        await wait_state(call, lambda s: s.turns == 1)
        await call.hangup("user_hangup")
        record = await call.handle.result()
    key = f"calls/{call.call_id}.ogg"
    rec = record.recording
    assert rec is not None and rec.status == "completed", rec
    assert rec.location == f"{scheme}://{bucket}/{key}"  # the store's terms, not egress's https address
    sent = lk.egresses[rec.id].room_composite.file_outputs[0]
    if scheme == "gs":
        assert sent.gcp.bucket == bucket
    else:
        assert (sent.azure.account_name, sent.azure.container_name) == (AZURE_ACCOUNT, bucket)
    assert store.keys(bucket) == [key]

    code, out, err = await forget(env, call.call_id, "--json")
    assert code == 0, (out, err)
    (done,) = json.loads(out)
    assert f"recording {rec.location}" in done["erased"]
    assert store.keys(bucket) == []
    assert load_call(call.call_id, database_url=sqlite_url) is None
