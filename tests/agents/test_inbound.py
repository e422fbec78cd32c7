"""An inbound SIP call: the agent starts the workflow itself (update-with-start) and attaches."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest
from temporalio.client import Client

from ringflow.activities import flow_store
from ringflow.activities.flow_store import FlowRefError
from ringflow.agents.livekit_api import call_id_for_room
from ringflow.callflow.loader import load_flow
from ringflow.servers.agent import SIP_CALLED, SIP_CALLER, start_inbound
from ringflow.settings import Settings
from ringflow.workflows.client import CallHandle, start_or_attach
from tests.support.wfkit import FIXTURES, running_worker


@dataclass
class Participant:
    """The two SIP attributes LiveKit sets on a phone caller (all the code reads)."""

    attributes: dict[str, str] = field(default_factory=dict)


async def test_inbound_call_starts_its_own_workflow_and_a_second_agent_attaches(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    room = f"sip-room-{uuid.uuid4().hex[:8]}"
    settings = Settings(task_queue=task_queue, inbound_flows={"+15550100": str(FIXTURES / "triage.yaml")})
    caller = Participant({SIP_CALLER: "+15550199", SIP_CALLED: "+15550100"})
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call_id = await start_inbound(temporal_client, settings, room, caller, None, "agent-1", {})
        assert call_id == call_id_for_room(room) != room  # every dispatch-rule room is hashed
        call = CallHandle(temporal_client, call_id)
        st = await call.state()
        assert st.status == "live" and st.agent_id == "agent-1" and st.flow == "triage"
        # The same room again (a second dispatch, a retried job): attach, don't start twice.
        _, snap = await start_or_attach(
            temporal_client,
            load_flow(FIXTURES / "triage.yaml"),
            task_queue=task_queue,
            call_id=call_id,
            agent_id="agent-2",
        )
        assert snap.node == "intake" and snap.state.caller_number == "+15550199"
        assert (await call.state()).agent_id == "agent-2"
        desc = await call.handle.describe()
        values = {p.key.name: p.value for p in desc.typed_search_attributes.search_attributes}
        assert values["RingflowDirection"] == "inbound"
        assert "+15550199" not in str(values)  # no phone numbers in search attributes
        await call.hangup()
        record = await call.handle.result()
    assert record.direction == "inbound" and record.end_reason == "user_hangup"


async def test_inbound_call_without_a_flow_is_refused_clearly(
    temporal_client: Client, task_queue: str
) -> None:
    settings = Settings(task_queue=task_queue)
    with pytest.raises(RuntimeError, match="RINGFLOW_INBOUND_FLOW"):
        await start_inbound(
            temporal_client, settings, "room-x", Participant({SIP_CALLED: "+1555"}), None, "agent-1", {}
        )


async def test_a_room_named_by_livekit_s_dispatch_rule_gets_a_call_id_of_its_own(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """LiveKit names an individual rule's room ``<prefix>_<caller>_<random>``: no valid call
    id, and a phone number that must not be a workflow id. The call gets an id derived from
    the room (the same every time, as the webhook receiver derives it) and keeps the room."""
    from livekit.protocol.models import Room

    from ringflow.agents.webhooks import call_id_of

    room = f"call-_+15550199_{uuid.uuid4().hex[:12]}"
    settings = Settings(task_queue=task_queue, inbound_flows={"+15550100": str(FIXTURES / "triage.yaml")})
    caller = Participant({SIP_CALLER: "+15550199", SIP_CALLED: "+15550100"})
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call_id = await start_inbound(temporal_client, settings, room, caller, None, "agent-1", {})
        again = await start_inbound(temporal_client, settings, room, caller, None, "agent-2", {})
        call = CallHandle(temporal_client, call_id)
        st = await call.state()
        await call.hangup()
        record = await call.handle.result()
    assert call_id == again and call_id.startswith("in-") and "15550199" not in call_id
    assert call_id_of(Room(name=room)) == call_id  # where LiveKit's webhooks for the room go
    assert st.room == room and st.agent_id == "agent-2"
    assert record.room == room and record.call_id == call_id


async def test_an_inbound_number_on_a_channel_starts_calls_of_the_version_it_serves(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """``sip setup --flow triage@production``: each call takes the channel's version when it
    starts and names it; a promotion moves the next call, not the one running."""
    d = load_flow(FIXTURES / "triage.yaml")
    v1 = flow_store.publish(sqlite_url, d, flow_store.handler_hashes(d, FIXTURES))
    flow_store.promote(sqlite_url, "triage", v1.version, "production")
    settings = Settings(
        task_queue=task_queue, database_url=sqlite_url, inbound_flows={"+15550100": "triage@production"}
    )
    caller = Participant({SIP_CALLER: "+15550199", SIP_CALLED: "+15550100"})
    async with running_worker(temporal_client, task_queue, sqlite_url):
        first = await start_inbound(
            temporal_client, settings, f"sip-room-{uuid.uuid4().hex[:8]}", caller, None, "agent-1", {}
        )
        v2 = flow_store.publish(
            sqlite_url, flow_store.named(d, "triage").model_copy(update={"source": "x"}), {}
        )
        assert v2.version != v1.version  # no handler hashes: another version
        flow_store.promote(sqlite_url, "triage", v2.version, "production")
        second = await start_inbound(
            temporal_client, settings, f"sip-room-{uuid.uuid4().hex[:8]}", caller, None, "agent-1", {}
        )
        refs = []
        for call_id in (first, second):
            snap = await CallHandle(temporal_client, call_id).attach("agent-2")
            refs.append(snap.flow_ref)
            await CallHandle(temporal_client, call_id).hangup()
    assert refs == [v1.ref, v2.ref]
    with pytest.raises(FlowRefError, match="neither a published version nor a channel"):
        await start_inbound(
            temporal_client,
            settings.model_copy(update={"inbound_flows": {"+15550100": "triage@staging"}}),
            f"sip-room-{uuid.uuid4().hex[:8]}",
            caller,
            None,
            "agent-1",
            {},
        )


def test_every_dispatch_rule_room_is_hashed_with_or_without_a_plus() -> None:
    """``call-_15557654321_...`` is a valid call id as it stands: it once became the workflow
    id, the caller's number readable in every list and log."""
    from ringflow.agents.livekit_api import call_id_for_room

    for room in ("call-_15557654321_x7Yq2", "call-_+15557654321_x7Yq2", "lobby"):
        call_id = call_id_for_room(room)
        assert call_id.startswith("in-") and "5557654321" not in call_id and call_id == call_id_for_room(room)
    assert call_id_for_room("call-_15557654321_a") != call_id_for_room("call-_15557654321_b")
