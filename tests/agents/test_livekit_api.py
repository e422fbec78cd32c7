"""agents/livekit_api.py against a protocol-level fake LiveKit server, through the real SDK.

The fake (ringflow/livekit_fake.py) speaks Twirp/protobuf with JWT auth on 127.0.0.1, so these
tests exercise the SDK's real requests: what the dispatcher sends, how each server answer is
classified (result vs. raise), and that Temporal's retries follow from that classification.
"""

from __future__ import annotations

import socket
import uuid
from datetime import timedelta
from typing import Any

import aiohttp
import pytest
from livekit.api import (
    CreateAgentDispatchRequest,
    ListParticipantsRequest,
    LiveKitAPI,
    RoomParticipantIdentity,
)
from livekit.api import ServerError as LiveKitServerError
from livekit.protocol import room as proto_room
from temporalio import workflow
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Worker

from ringflow.activities.dispatch import AgentDispatch, DispatchRequest, DispatchResult
from ringflow.agents.livekit_api import (
    JobInfo,
    JobMetadataError,
    LiveKitDispatcher,
    LiveKitRefused,
    LiveKitUnavailable,
    close_room,
    job_metadata,
    parse_job_metadata,
)
from ringflow.agents.livekit_egress import LiveKitRecorder
from ringflow.agents.livekit_sip import LiveKitTelephony
from ringflow.servers.worker import call_services
from ringflow.settings import Settings
from ringflow.simulation.livekit_fake import JSON, PROTOBUF, FakeLiveKit
from ringflow.workflows import activity_calls

ROOM = "call-room-1"


def dispatcher_for(lk: FakeLiveKit, **overrides: str) -> LiveKitDispatcher:
    args = {"url": lk.url, "api_key": lk.api_key, "api_secret": lk.api_secret, **overrides}
    return LiveKitDispatcher(args["url"], args["api_key"], args["api_secret"], agent_name="ringflow-test")


def closed_port_url() -> str:
    """A URL nothing listens on: connecting is refused at once (a transport error)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# -- dispatch -----------------------------------------------------------------------------


async def test_dispatch_creates_a_dispatch_carrying_the_call_id(lk: FakeLiveKit) -> None:
    lk.add_room(ROOM, participants=("sip_+15550100",))
    res = await dispatcher_for(lk).dispatch(DispatchRequest(call_id="call-1", room=ROOM, attempt=1))

    assert res.dispatched, res.detail
    [dispatch] = lk.dispatches.values()
    assert (dispatch.agent_name, dispatch.room) == ("ringflow-test", ROOM)
    assert dispatch.metadata_json() == {"call_id": "call-1", "resume": True}
    assert parse_job_metadata(dispatch.metadata) == JobInfo(call_id="call-1", resume=True)
    assert dispatch.id in res.detail
    # What the SDK actually sent: protobuf Twirp, signed, one idempotency key per request.
    assert [r.method for r in lk.requests] == ["RoomService/ListRooms", "AgentDispatchService/CreateDispatch"]
    for req in lk.requests:
        assert req.status == 200 and req.content_type == PROTOBUF and req.api_key == lk.api_key
        assert req.request_id and (req.user_agent or "").startswith("livekit-server-sdk-python/")
    create = lk.calls("CreateDispatch")[0].body
    assert isinstance(create, CreateAgentDispatchRequest) and create.room == ROOM


def livekit_environment(lk: FakeLiveKit, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RINGFLOW_DISPATCHER", "livekit")
    monkeypatch.setenv("LIVEKIT_URL", lk.url.replace("http://", "ws://"))  # as LiveKit configs spell it
    monkeypatch.setenv("LIVEKIT_API_KEY", lk.api_key)
    monkeypatch.setenv("LIVEKIT_API_SECRET", lk.api_secret)


async def test_agent_name_and_credentials_come_from_the_settings(
    lk: FakeLiveKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's entry point builds the dispatcher and the telephony from its settings."""
    livekit_environment(lk, monkeypatch)
    monkeypatch.delenv("RINGFLOW_AGENT_NAME", raising=False)
    default = call_services(Settings())
    assert isinstance(default.dispatcher, LiveKitDispatcher) and default.dispatcher.agent_name == "ringflow"
    monkeypatch.setenv("RINGFLOW_AGENT_NAME", "clinic-agent")
    monkeypatch.setenv("RINGFLOW_SIP_TRUNK_ID", "ST_env")
    monkeypatch.setenv("RINGFLOW_SIP_RINGING_TIMEOUT_S", "12")
    services = call_services(Settings())
    dispatcher, phone = services.dispatcher, services.telephony
    assert isinstance(dispatcher, LiveKitDispatcher) and isinstance(phone, LiveKitTelephony)
    assert dispatcher.agent_name == phone.agent_name == "clinic-agent"
    assert (phone.trunk_id, phone.ringing_timeout_s) == ("ST_env", 12.0)
    assert lk.api_secret not in repr(dispatcher) and lk.api_secret not in repr(phone)
    assert isinstance(services.recorder, LiveKitRecorder) and lk.api_secret not in repr(services.recorder)
    monkeypatch.setenv("RINGFLOW_DISPATCHER", "none")
    assert call_services(Settings()) == (None, None, None)

    lk.add_room(ROOM)
    assert (await dispatcher.dispatch(DispatchRequest(call_id="c", room=ROOM))).dispatched
    assert [d.agent_name for d in lk.dispatches.values()] == ["clinic-agent"]


def test_missing_configuration_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("LIVEKIT_URL", "LIVEKIT_API_KEY", "LIVEKIT_API_SECRET"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ValueError, match="LIVEKIT_API_KEY, LIVEKIT_API_SECRET"):
        LiveKitDispatcher(url="http://127.0.0.1:1")


async def test_a_call_without_a_room_is_not_dispatched(lk: FakeLiveKit) -> None:
    res = await dispatcher_for(lk).dispatch(DispatchRequest(call_id="call-1", room=None))
    assert not res.dispatched and "no LiveKit room" in res.detail
    assert lk.requests == []


async def test_a_room_that_is_gone_is_not_resurrected(lk: FakeLiveKit) -> None:
    """The fake auto-creates rooms on dispatch like a server may; the caller has left, so
    the dispatcher must not dispatch (and create an empty room with an agent in it)."""
    res = await dispatcher_for(lk).dispatch(DispatchRequest(call_id="call-1", room="gone-room"))
    assert not res.dispatched and "no longer exists" in res.detail
    assert lk.dispatches == {} and lk.rooms == {}
    assert [r.method for r in lk.requests] == ["RoomService/ListRooms"]


async def test_a_room_refused_by_create_dispatch_is_not_dispatched() -> None:
    """A room that vanishes between the check and the dispatch (server without auto-create)."""
    async with FakeLiveKit(auto_create_rooms=False) as lk:
        lk.add_room(ROOM)
        lk.fail_next(1, 404, method="CreateDispatch", msg="requested room does not exist")
        res = await dispatcher_for(lk).dispatch(DispatchRequest(call_id="call-1", room=ROOM))
    assert not res.dispatched and "no longer exists" in res.detail and "404" in res.detail


@pytest.mark.parametrize("as_text", [False, True], ids=["twirp-json", "plain-text"])
@pytest.mark.parametrize("bad", ["secret", "key"])
async def test_bad_credentials_are_refused_not_retried(bad: str, as_text: bool) -> None:
    async with FakeLiveKit(auth_errors_as_text=as_text) as lk:
        lk.add_room(ROOM)
        dispatcher = dispatcher_for(
            lk,
            **({"api_secret": "wrong-secret-" + "x" * 32} if bad == "secret" else {"api_key": "APIunknown"}),
        )
        res = await dispatcher.dispatch(DispatchRequest(call_id="call-1", room=ROOM))
    assert not res.dispatched
    assert "refused API key" in res.detail and "401" in res.detail
    assert lk.dispatches == {}
    assert [(r.status, r.error_code) for r in lk.requests] == [(401, "unauthenticated")]


async def test_5xx_raises_so_the_caller_retries_and_the_retry_succeeds(lk: FakeLiveKit) -> None:
    lk.add_room(ROOM)
    lk.fail_next(1, 503, method="CreateDispatch")
    dispatcher = dispatcher_for(lk)
    req = DispatchRequest(call_id="call-1", room=ROOM)
    with pytest.raises(LiveKitUnavailable, match="503"):
        await dispatcher.dispatch(req)
    assert lk.dispatches == {}
    assert (await dispatcher.dispatch(req)).dispatched
    assert len(lk.dispatches) == 1
    assert [r.status for r in lk.calls("CreateDispatch")] == [503, 200]


async def test_transport_errors_raise() -> None:
    dispatcher = LiveKitDispatcher(closed_port_url(), "key", "s" * 32)
    with pytest.raises(LiveKitUnavailable, match="unreachable"):
        await dispatcher.dispatch(DispatchRequest(call_id="call-1", room=ROOM))


# -- the dispatch_agent activity and Temporal's retries -----------------------------------


@pytest.fixture
def dispatch_agent(lk: FakeLiveKit, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The ``dispatch_agent`` activity of a worker started with RINGFLOW_DISPATCHER=livekit."""
    livekit_environment(lk, monkeypatch)
    monkeypatch.setenv("RINGFLOW_AGENT_NAME", "ringflow")
    return AgentDispatch(call_services(Settings()).dispatcher).dispatch_agent


async def test_the_dispatch_agent_activity_routes_to_livekit(lk: FakeLiveKit, dispatch_agent: Any) -> None:
    lk.add_room(ROOM)
    res = await ActivityEnvironment().run(dispatch_agent, DispatchRequest(call_id="call-7", room=ROOM))
    assert res.dispatched, res.detail
    [dispatch] = lk.dispatches.values()
    assert dispatch.agent_name == "ringflow"
    assert dispatch.metadata_json() == {"call_id": "call-7", "resume": True}

    lk.fail_next(1, 502)
    with pytest.raises(LiveKitUnavailable):
        await ActivityEnvironment().run(dispatch_agent, DispatchRequest(call_id="call-7", room=ROOM))


@workflow.defn(sandboxed=False)
class DispatchProbe:
    """Calls dispatch_agent exactly as CallWorkflow.agent_lost() does (same retry policy)."""

    @workflow.run
    async def run(self, req: DispatchRequest) -> DispatchResult:
        return await activity_calls.dispatch_agent(req)


async def test_temporal_retries_transient_failures_only(
    lk: FakeLiveKit, dispatch_agent: Any, temporal_client: Client, task_queue: str
) -> None:
    lk.add_room(ROOM)

    async def run(call_id: str) -> DispatchResult:
        return await temporal_client.execute_workflow(
            DispatchProbe.run,
            DispatchRequest(call_id=call_id, room=ROOM),
            id=f"probe-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
            execution_timeout=timedelta(minutes=1),
        )

    async with Worker(
        temporal_client, task_queue=task_queue, workflows=[DispatchProbe], activities=[dispatch_agent]
    ):
        # A 503 fails the first attempt; Temporal's retry dispatches once.
        lk.fail_next(1, 503, method="CreateDispatch")
        res = await run("retried")
        assert res.dispatched, res.detail
        assert [r.status for r in lk.calls("CreateDispatch")] == [503, 200]
        assert [d.metadata_json()["call_id"] for d in lk.dispatches.values()] == ["retried"]

        # Unavailable throughout: attempts run out and agent_lost() sees dispatched=False.
        lk.requests.clear()
        lk.fail_next(2, 503, method="CreateDispatch")
        res = await run("unavailable")
        # (workflows/activity_calls.py reports the ActivityError's own text, not its cause.)
        assert not res.dispatched and res.detail.startswith("dispatch failed")
        assert [r.status for r in lk.calls("CreateDispatch")] == [503, 503]

        # Refused credentials: a result on the first attempt, no retry.
        lk.requests.clear()
        lk.api_secret = "rotated-" + lk.api_secret  # the server no longer accepts the worker's secret
        res = await run("refused")
        assert not res.dispatched and "refused API key" in res.detail
        assert [r.status for r in lk.requests] == [401]
        assert len(lk.dispatches) == 1


# -- close_room ---------------------------------------------------------------------------


async def test_close_room_deletes_and_is_idempotent(lk: FakeLiveKit) -> None:
    lk.add_room(ROOM, participants=("sip_+15550100", "agent-1"))
    await dispatcher_for(lk).dispatch(DispatchRequest(call_id="call-1", room=ROOM))
    creds = {"url": lk.url, "api_key": lk.api_key, "api_secret": lk.api_secret}

    assert await close_room(ROOM, **creds) is True
    assert ROOM not in lk.rooms and lk.deleted_rooms == [ROOM]
    assert lk.dispatches == {}
    assert await close_room(ROOM, **creds) is False
    assert await close_room("", **creds) is False
    assert lk.deleted_rooms == [ROOM]
    assert [r.status for r in lk.calls("DeleteRoom")] == [200, 404]


async def test_close_room_needs_its_credentials(lk: FakeLiveKit, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not read from the environment behind the caller's back: the entry point passes them."""
    livekit_environment(lk, monkeypatch)
    lk.add_room(ROOM)
    with pytest.raises(ValueError, match="LIVEKIT_API_SECRET"):
        await close_room(ROOM, url=lk.url, api_key=lk.api_key)
    assert ROOM in lk.rooms


async def test_close_room_failures_raise_by_kind(lk: FakeLiveKit) -> None:
    lk.add_room(ROOM)
    with pytest.raises(LiveKitRefused, match="401") as refused:
        await close_room(ROOM, url=lk.url, api_key=lk.api_key, api_secret="wrong-secret-" + "x" * 32)
    assert refused.value.status == 401
    lk.fail_next(1, 503)
    with pytest.raises(LiveKitUnavailable, match="503"):
        await close_room(ROOM, url=lk.url, api_key=lk.api_key, api_secret=lk.api_secret)
    with pytest.raises(LiveKitUnavailable, match="unreachable"):
        await close_room(ROOM, url=closed_port_url(), api_key="k", api_secret="s" * 32)
    assert ROOM in lk.rooms


# -- parse_job_metadata -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, JobInfo()),
        ("", JobInfo()),
        ("  \n", JobInfo()),
        (job_metadata("call-9"), JobInfo(call_id="call-9", resume=True)),
        ('{"call_id": "call-9"}', JobInfo(call_id="call-9")),
        (
            '{"flow": "clinic", "variables": {"lang": "de", "vip": true}}',
            JobInfo(flow="clinic", variables={"lang": "de", "vip": True}),
        ),
        ('{"call_id": "c", "resume": false, "attempt": 3}', JobInfo(call_id="c")),  # unknown keys ignored
    ],
)
def test_parse_job_metadata_accepts(raw: str | None, expected: JobInfo) -> None:
    assert parse_job_metadata(raw) == expected


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{bad", "not valid JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
        ('{"call_id": "c",}', "not valid JSON"),
        ("[1, 2]", "must be a JSON object, got list"),
        ('"call-1"', "must be a JSON object, got str"),
        ('{"call_id": 42}', "call_id: Input should be a valid string"),
        ('{"call_id": ""}', "call_id: String should have at least 1 character"),
        ('{"call_id": "c", "resume": "yes"}', "resume: Input should be a valid boolean"),
        ('{"resume": true}', "resume is true but there is no call_id"),
        ('{"variables": []}', "variables: Input should be a valid dictionary"),
    ],
)
def test_parse_job_metadata_rejects_with_a_clear_message(raw: str, message: str) -> None:
    with pytest.raises(JobMetadataError) as err:
        parse_job_metadata(raw)
    text = str(err.value)
    assert isinstance(err.value, ValueError)
    assert text.startswith("job metadata ") and message in text and "\n" not in text
    # No chained JSON/pydantic traceback behind it.
    assert err.value.__cause__ is None and (err.value.__context__ is None or err.value.__suppress_context__)


def test_parse_job_metadata_quotes_long_input_briefly() -> None:
    with pytest.raises(JobMetadataError) as err:
        parse_job_metadata("{" + "x" * 500)
    assert len(str(err.value)) < 200


# -- the fake itself: it must refuse what a real server refuses ---------------------------


async def test_fake_checks_grants_per_room(lk: FakeLiveKit) -> None:
    lk.add_room(ROOM, participants=("caller",))
    dispatch_request = CreateAgentDispatchRequest(agent_name="a", room=ROOM)
    for grants in ({"roomList": True}, {"roomAdmin": True, "room": "another-room"}, None):
        async with LiveKitAPI.with_token(lk.token(grants), lk.url) as api:
            with pytest.raises(LiveKitServerError) as err:
                await api.agent_dispatch.create_dispatch(dispatch_request)
        assert (err.value.status, err.value.code, err.value.message) == (
            401,
            "unauthenticated",
            "permissions denied",
        )
    async with LiveKitAPI.with_token(lk.token({"roomAdmin": True, "room": ROOM}), lk.url) as api:
        listed = await api.room.list_participants(ListParticipantsRequest(room=ROOM))
        assert [p.identity for p in listed.participants] == ["caller"]
        await api.room.remove_participant(RoomParticipantIdentity(room=ROOM, identity="caller"))
        with pytest.raises(LiveKitServerError) as err:
            await api.room.remove_participant(RoomParticipantIdentity(room=ROOM, identity="caller"))
        assert (err.value.status, err.value.code) == (404, "not_found")
        created = await api.agent_dispatch.create_dispatch(dispatch_request)
        assert [d.id for d in await api.agent_dispatch.list_dispatch(ROOM)] == [created.id]
        await api.agent_dispatch.delete_dispatch(created.id, ROOM)
        assert await api.agent_dispatch.list_dispatch(ROOM) == []


async def test_fake_rejects_bad_tokens_over_raw_http(lk: FakeLiveKit) -> None:
    url = f"{lk.url}/twirp/livekit.RoomService/ListRooms"
    body = proto_room.ListRoomsRequest().SerializeToString()
    cases = {
        "expired": (lk.token({"roomList": True}, ttl=-120), "invalid token"),
        "bad signature": (lk.token({"roomList": True}, secret="not-the-secret-" + "x" * 32), "invalid token"),
        "no exp": (lk.token({"roomList": True}, exp=None), "invalid token"),
        "garbage": ("not-a-jwt", "invalid authorization token"),
    }
    async with aiohttp.ClientSession() as session:
        for name, (token, msg) in cases.items():
            async with session.post(
                url, data=body, headers={"Authorization": f"Bearer {token}", "Content-Type": PROTOBUF}
            ) as resp:
                assert resp.status == 401, name
                payload = await resp.json()
                assert payload["code"] == "unauthenticated", (name, payload)
                assert payload["msg"].startswith(msg), (name, payload)
        # Twirp's JSON encoding works too, and routing errors are Twirp's.
        lk.add_room(ROOM)
        good = {"Authorization": f"Bearer {lk.token({'roomList': True})}", "Content-Type": JSON}
        async with session.post(url, data=b'{"names": ["call-room-1"]}', headers=good) as resp:
            assert resp.status == 200 and (await resp.json())["rooms"][0]["name"] == ROOM
        async with session.get(url, headers=good) as resp:
            assert (resp.status, (await resp.json())["code"]) == (404, "bad_route")
