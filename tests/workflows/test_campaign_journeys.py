"""Campaigns of journeys end to end: a real CampaignWorkflow on a real Temporal dev server
starting each contact's JourneyWorkflow, whose calls are real CallWorkflows dialed through
the LiveKit telephony code against the protocol-level fake, paced on the real Redis, the
contacts and the do-not-call list in SQLite. A follow-up days away runs on the journey's
scaled clock (the campaign's ``time_scale``), as in ``test_journey.py``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from ringflow.activities import flow_store
from ringflow.activities.campaign_rules import parse_windows
from ringflow.contract.call import CallInput
from ringflow.contract.dial import Dial
from ringflow.contract.ids import journey_workflow_id
from ringflow.contract.journey import JourneyView
from ringflow.flow_codec import REF_KEY
from ringflow.workflows.campaign_messages import CampaignInput, Limits
from ringflow.workflows.client import CallHandle
from ringflow.workflows.journey_client import JourneyHandle, add_do_not_call
from tests.support.campaignkit import REDIS, contacts, fake_line, new_id, progress, run_campaign
from tests.support.journeykit import follow_up_asked, journey_agent, journey_flow, phone
from tests.support.wfkit import FIXTURES, running_worker, wait_until


def journeys_input(cid: str, window: str = "always", time_scale: float = 1.0) -> CampaignInput:
    return CampaignInput(
        campaign_id=cid,
        definition=journey_flow(),
        trunk_id=f"trunk-{cid}",
        limits=Limits(cps=20),
        windows=parse_windows([window]),
        time_scale=time_scale,
        ringing_timeout_s=5,
        journeys=True,
        journey_open_for_s=0,
    )


def journey_of(client: Client, number: str) -> JourneyHandle:
    return JourneyHandle(client, journey_workflow_id(journey_flow().flow.flow, number))


async def test_a_campaign_of_two_contacts_starts_their_two_journeys_and_ends_with_them(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    cid = new_id("cj")
    people = [phone(301), phone(302)]
    async with (
        fake_line(monkeypatch) as lk,
        running_worker(temporal_client, task_queue, sqlite_url, redis_url=REDIS),
        journey_agent(temporal_client, lk, ["done", "done"]) as seen,
    ):
        handle = await run_campaign(
            temporal_client, task_queue, sqlite_url, journeys_input(cid), contacts(*people)
        )
        result = await handle.result()
        views = [await journey_of(temporal_client, p).result() for p in people]
    assert result["status"] == "finished"
    assert result["stats"]["journeys"] == 2 and result["stats"]["outcome_completed"] == 2, result["stats"]
    for view in views:
        assert (view.end, view.calls_total) == ("completed", 1)
        assert view.calls[0].node == "finished" and view.calls[0].disposition == "done"
    assert sorted(d.sip_call_to for d in lk.dials) == sorted(people)
    # each call is its journey's, and the campaign's
    assert all(s.journey is not None and s.journey.call == 1 for s in seen.starts)
    assert {s.journey.journey_id for s in seen.starts if s.journey} == {v.journey_id for v in views}


async def follow_up_of(j: JourneyHandle) -> JourneyView | None:
    """The journey once its first call asked for a follow-up (None before it has started)."""
    try:
        return await follow_up_asked(j)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise


def noon_zone(now: datetime) -> str:
    """A fixed-offset zone where it is about midday now, so a window around noon holds now."""
    offset = 12 - now.hour  # -11..12: Etc/GMT+11 (UTC-11) .. Etc/GMT-12 (UTC+12)
    return f"Etc/GMT{-offset:+d}" if offset else "UTC"


async def test_a_journeys_follow_up_outside_the_campaigns_window_is_deferred_into_it(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """The flow's follow-up is "in 2 days at 10:00"; the campaign calls from 11:00, so the
    journey's second call is due at 11:00 that day, the person's time."""
    cid = new_id("cj")
    number = phone(303)
    tz = noon_zone(datetime.now(UTC))
    inp = journeys_input(cid, window="Mon-Sun 11:00-15:00", time_scale=20_000)
    async with (
        fake_line(monkeypatch) as lk,
        running_worker(temporal_client, task_queue, sqlite_url, redis_url=REDIS),
        journey_agent(temporal_client, lk, ["later", "done"]),
    ):
        handle = await run_campaign(temporal_client, task_queue, sqlite_url, inp, contacts(number, tz=tz))
        j = journey_of(temporal_client, number)
        asked = await wait_until(lambda: follow_up_of(j), what="the follow-up scheduled")
        result = await handle.result()
        view: JourneyView = await j.result()
    first_call = datetime.fromtimestamp(view.calls[0].started_at, ZoneInfo(tz))
    due = datetime.combine(first_call.date() + timedelta(days=2), datetime.min.time(), ZoneInfo(tz))
    due = due.replace(hour=11)
    assert asked.follow_up is not None and asked.follow_up.due_at == due.timestamp()
    assert (view.end, view.calls_total) == ("completed", 2)
    assert due.timestamp() <= view.calls[1].started_at < due.timestamp() + 120
    assert view.calls[1].node == "finished"
    assert result["status"] == "finished" and [d.sip_call_to for d in lk.dials] == [number, number]
    # both calls took a slot on the trunk: the first the campaign's attempt's, the second its own
    first, second = [(await dial_of(temporal_client, d.room_name)).not_before for d in lk.dials]
    assert first is not None and second is not None and first < second


async def dial_of(client: Client, call_id: str) -> Dial:
    """The dial a call was started with (its workflow's input, from its history)."""
    history = await CallHandle(client, call_id).handle.fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    [inp] = await client.data_converter.decode(started.input.payloads, [CallInput])
    assert isinstance(inp, CallInput) and inp.dial is not None
    return inp.dial


async def test_a_contact_put_on_the_do_not_call_list_has_its_journey_ended_and_no_further_call(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    cid = new_id("cj")
    number = phone(304)
    async with (
        fake_line(monkeypatch) as lk,
        running_worker(temporal_client, task_queue, sqlite_url, redis_url=REDIS),
        journey_agent(temporal_client, lk, ["later"]),
    ):
        handle = await run_campaign(
            temporal_client, task_queue, sqlite_url, journeys_input(cid), contacts(number)
        )
        j = journey_of(temporal_client, number)
        await wait_until(lambda: follow_up_of(j), what="the follow-up scheduled")
        assert await add_do_not_call(temporal_client, sqlite_url, [number]) == [j.journey_id]
        view = await j.result()
        result = await handle.result()
    assert (view.end, view.calls_total, view.follow_up) == ("dnc", 1, None)
    assert result["status"] == "finished" and result["stats"]["outcome_dnc"] == 1
    assert [d.sip_call_to for d in lk.dials] == [number]


async def test_cancelling_a_campaign_of_journeys_ends_its_open_journeys(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    cid = new_id("cj")
    number = phone(305)
    async with (
        fake_line(monkeypatch) as lk,
        running_worker(temporal_client, task_queue, sqlite_url, redis_url=REDIS),
        journey_agent(temporal_client, lk, ["later"]),
    ):
        handle = await run_campaign(
            temporal_client, task_queue, sqlite_url, journeys_input(cid), contacts(number)
        )
        j = journey_of(temporal_client, number)
        await wait_until(lambda: follow_up_of(j), what="the follow-up scheduled")
        assert (await progress(handle))["journeys"] == 1
        await handle.execute_update("cancel")
        view = await j.result()
        result = await handle.result()
    assert (view.end, view.calls_total, view.follow_up) == ("cancelled", 1, None)
    assert result["status"] == "cancelled" and [d.sip_call_to for d in lk.dials] == [number]


async def held_past_due(j: JourneyHandle, due_at: float) -> JourneyView | None:
    """The journey once its follow-up's time has come while its campaign holds it."""
    view = await j.state()
    return view if view.held and view.now >= due_at and view.active_call is None else None


async def test_a_paused_campaign_holds_its_journeys_follow_ups_which_go_on_resume(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """The first call asks for a follow-up; the campaign is paused before it is due: the
    follow-up's time comes and goes with no call, and the call is placed once the campaign
    resumes. The campaign names its published version: the journey's input and both calls'
    inputs carry the version, not the definition (``flow_codec``)."""
    cid = new_id("cj")
    number = phone(306)
    definition = journey_flow()
    version = flow_store.publish(sqlite_url, definition, flow_store.handler_hashes(definition, FIXTURES))
    inp = journeys_input(cid, time_scale=20_000).model_copy(update={"flow_ref": version.ref})
    async with (
        fake_line(monkeypatch) as lk,
        running_worker(temporal_client, task_queue, sqlite_url, redis_url=REDIS),
        journey_agent(temporal_client, lk, ["later", "done"]),
    ):
        handle = await run_campaign(temporal_client, task_queue, sqlite_url, inp, contacts(number))
        j = journey_of(temporal_client, number)
        asked = await wait_until(lambda: follow_up_of(j), what="the follow-up scheduled")
        assert asked.follow_up is not None
        await handle.execute_update("pause", "hold the follow-ups")
        held = await wait_until(
            lambda: held_past_due(j, asked.follow_up.due_at), what="the follow-up due while held"
        )
        assert held.status == "scheduled" and len(lk.dials) == 1  # due, and not called
        await handle.execute_update("resume")
        result = await handle.result()
        view: JourneyView = await j.result()
    assert result["status"] == "finished" and (view.end, view.calls_total) == ("completed", 2)
    assert not view.held and [d.sip_call_to for d in lk.dials] == [number, number]
    assert view.calls[1].started_at >= asked.follow_up.due_at
    assert "held: its campaign is paused" in view.notes and "resumed with its campaign" in view.notes
    # the version, not the definition: in the campaign's start of the journey and in each call
    inner = temporal_client.data_converter.payload_codec.inner  # type: ignore[union-attr]
    campaign = await temporal_client.get_workflow_handle(handle.id).fetch_history()
    [journey_start] = [
        e.start_child_workflow_execution_initiated_event_attributes.input.payloads[0]
        for e in campaign.events
        if e.HasField("start_child_workflow_execution_initiated_event_attributes")
    ]
    [plain] = await inner.decode([journey_start])
    assert plain.metadata[REF_KEY] == version.version.encode() and b'"nodes"' not in plain.data
    for d in lk.dials:
        history = await CallHandle(temporal_client, d.room_name).handle.fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes.input.payloads[0]
        [call_plain] = await inner.decode([started])
        assert call_plain.metadata[REF_KEY] == version.version.encode()
        [call_inp] = await temporal_client.data_converter.decode([started], [CallInput])
        assert call_inp.flow_ref == version.ref and call_inp.definition.flow.flow == definition.flow.flow
