"""Journeys end to end: a real JourneyWorkflow on a real Temporal dev server, its calls real
child CallWorkflows dialed through the LiveKit telephony code against the protocol-level
fake, the do-not-call list in SQLite. Temporal's time-skipping test server cannot be
downloaded here (no network), so a follow-up days away runs on the journey's scaled clock
(``JourneyInput.time_scale``): its timer is a real durable timer of 1/20000 of the delay."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from temporalio.client import Client

from ringflow.callflow.effects import Say
from ringflow.callflow.engine import Engine
from ringflow.callflow.state import CallState
from ringflow.contract.journey import JoinRequest, JourneyRetry, JourneyView
from ringflow.workflows.client import CallHandle, start_or_attach
from ringflow.workflows.journey_client import (
    JourneyHandle,
    add_do_not_call,
    join_journey,
    start_journey,
)
from tests.support.campaignkit import fake_line
from tests.support.journeykit import (
    follow_up_asked,
    journey_agent,
    journey_flow,
    journey_with_follow_up,
    phone,
)
from tests.support.wfkit import Agent, running_worker, wait_until

ORIGIN = datetime(2026, 3, 6, 21, 0, tzinfo=UTC)  # Friday 16:00 in New York (EST, UTC-5)
DUE = datetime(2026, 3, 8, 14, 0, tzinfo=UTC)  # Sunday 10:00 in New York: EDT (UTC-4) since 02:00


async def status_is(j: JourneyHandle, status: str) -> JourneyView | None:
    view = await j.state()
    return view if view.status == status else None


async def test_a_follow_up_in_two_days_at_ten_fires_then_in_the_persons_time_across_dst_and_a_restart(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    flow = journey_flow()
    async with fake_line(monkeypatch) as lk, journey_agent(temporal_client, lk, ["later", "done"]) as seen:
        async with running_worker(temporal_client, task_queue, sqlite_url):
            j = await start_journey(
                temporal_client,
                flow,
                phone(171),
                task_queue=task_queue,
                timezone="America/New_York",
                variables={"patient": "Alex"},
                time_scale=20_000,
                clock_origin=ORIGIN.timestamp(),
                open_for_s=0,
            )
            view = await wait_until(lambda: follow_up_asked(j), what="the follow-up scheduled")
        assert view.follow_up is not None and view.follow_up.due_at == DUE.timestamp()
        assert view.follow_up.node == "check_in" and view.follow_up.why == "end node goodbye"
        # no worker while the follow-up waits: it is a timer on the server; a new worker replays
        async with running_worker(temporal_client, task_queue, sqlite_url):
            result = await wait_until(lambda: status_is(j, "ended"), what="the journey ended")
    assert (result.calls_total, result.end) == (2, "completed")
    first, second = result.calls
    assert (first.node, first.disposition) == ("goodbye", "follow_up")
    assert DUE.timestamp() <= second.started_at < DUE.timestamp() + 120
    assert (second.node, second.disposition) == ("finished", "done")
    start1, start2 = seen.starts
    assert start1.path[0] == "greet" and start1.journey is not None and start1.journey.call == 1
    assert start2.path[0] == "check_in" and start2.journey is not None and start2.journey.call == 2
    assert "call 1 (outbound): ended completed at goodbye" in start2.journey.context
    # what the agent attaching to the second call says first and gives the LLM
    engine = Engine(flow)
    said = [e.text for e in engine.arrival(start2) if isinstance(e, Say)]
    assert said == ["Calling back as promised."]
    node = engine.snapshot(start2)
    assert node is not None and "Earlier calls with this person" in node.prompt
    assert "ended completed at goodbye" in node.prompt


async def test_a_callback_joins_the_open_journey_at_its_callback_node_and_cancels_the_follow_up(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    flow = journey_flow()
    number = phone(172)
    async with (
        fake_line(monkeypatch) as lk,
        journey_agent(temporal_client, lk, ["later"]),
        running_worker(temporal_client, task_queue, sqlite_url),
    ):
        j = await journey_with_follow_up(temporal_client, task_queue, number)
        stranger = JoinRequest(call_id=f"in-{uuid.uuid4().hex[:8]}", caller_number="+12125550999")
        assert await join_journey(temporal_client, flow.flow.flow, "+12125550999", stranger) is None
        call_id = f"in-{uuid.uuid4().hex[:8]}"
        req = JoinRequest(call_id=call_id, room=call_id, caller_number=number)
        answer = await join_journey(temporal_client, flow.flow.flow, number, req)
        assert answer is not None and answer.joined and answer.cancelled_follow_up
        assert answer.node == "welcome_back"
        # the agent attaches as to any inbound call: to the call the journey started
        handle, snap = await start_or_attach(
            temporal_client,
            flow,
            task_queue=task_queue,
            call_id=call_id,
            agent_id="agent-1",
            variables={"patient": "Alex"},
            direction="inbound",
            room=call_id,
            caller_number=number,
        )
        assert snap.state.path == ["welcome_back"] and snap.state.journey is not None
        assert snap.state.journey.call == 2 and "ended completed at goodbye" in snap.state.journey.context
        await Agent(handle, epoch=snap.epoch).transition("welcome_back", "done")
        await handle.hangup()
        view = await wait_until(lambda: status_is(j, "open"), what="the callback summed up")
        assert view.calls_total == 2 and view.follow_up is None
        assert [c.direction for c in view.calls] == ["outbound", "inbound"]
        assert view.calls[1].node == "finished"
        await j.end()
        result = await j.result()
    assert result.end == "cancelled" and result.status == "ended"


async def test_the_do_not_call_list_ends_open_journeys_and_is_checked_before_each_call(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    flow = journey_flow()
    number = phone(173)
    blocked = "+12125550178"
    async with (
        fake_line(monkeypatch) as lk,
        journey_agent(temporal_client, lk, ["later"]),
        running_worker(temporal_client, task_queue, sqlite_url),
    ):
        j = await journey_with_follow_up(temporal_client, task_queue, number)
        assert await add_do_not_call(temporal_client, sqlite_url, [number, blocked]) == [j.journey_id]
        result = await j.result()
        assert (result.end, result.calls_total, result.follow_up) == ("dnc", 1, None)
        late = await start_journey(
            temporal_client, flow, blocked, task_queue=task_queue, variables={"patient": "Sam"}
        )
        refused = await late.result()
        assert (refused.end, refused.calls_total) == ("dnc", 0)
        assert blocked not in [d.sip_call_to for d in lk.dials]


async def test_a_journeys_history_stays_bounded_over_fifty_calls(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    flow = journey_flow()
    number = phone(174)
    async with running_worker(temporal_client, task_queue, sqlite_url):
        j = await start_journey(
            temporal_client,
            flow,
            number,
            task_queue=task_queue,
            variables={"patient": "Alex"},
            first_call=False,
            calls_per_run=10,
        )
        for n in range(1, 51):
            call_id = f"in-{uuid.uuid4().hex[:8]}"
            answer = await join_journey(
                temporal_client, flow.flow.flow, number, JoinRequest(call_id=call_id, caller_number=number)
            )
            assert answer is not None and answer.joined, (n, answer)
            call = CallHandle(temporal_client, call_id)
            state = await call.handle.query("call_state", result_type=CallState)
            assert state.journey is not None and state.journey.call == n
            await call.hangup()
            await call.handle.result()
            await wait_until(lambda n=n: calls_done(j, n), what=f"call {n} summed up")
        view = await j.state()
        events = [e async for e in j.handle.fetch_history_events()]
        await j.end()
    assert view.calls_total == 50 and view.runs >= 5
    assert [c.n for c in view.calls] == list(range(41, 51))
    assert len(events) < 300  # the run holds its last calls, not fifty


async def calls_done(j: JourneyHandle, n: int) -> bool:
    view = await j.state()
    return view.calls_total == n and view.active_call is None


async def test_a_call_that_does_not_reach_the_person_is_placed_again_by_the_journeys_rule(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    number = phone(176)
    async with fake_line(monkeypatch) as lk, running_worker(temporal_client, task_queue, sqlite_url):
        lk.set_answer(number, "no_answer")
        j = await start_journey(
            temporal_client,
            journey_flow(),
            number,
            task_queue=task_queue,
            variables={"patient": "Alex"},
            retry={"no_answer": JourneyRetry(count=2, delay_s=3600)},
            time_scale=20_000,
            open_for_s=0,
        )
        result = await j.result()
    assert (result.calls_total, result.end) == (3, "completed")
    assert [c.end_reason for c in result.calls] == ["no_answer"] * 3
    gaps = [b.started_at - a.ended_at for a, b in zip(result.calls, result.calls[1:], strict=False)]
    assert all(3600 <= g < 3600 + 120 for g in gaps), gaps  # each an hour on the journey's clock
    assert [d.sip_call_to for d in lk.dials].count(number) == 3
