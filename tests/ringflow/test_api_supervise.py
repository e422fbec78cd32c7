"""Supervisors and journeys over HTTP against a real Temporal dev server, worker and
database: ``listen`` answers a hidden subscribe-only LiveKit token (checked by the LiveKit
protocol fake), ``whisper|takeover|handback`` are recorded by the call's workflow with the
API key's name (or ``by``), its refusals are 409 problems with its reason; journeys are
listed by flow and status, shown with their calls on one timeline and cancelled."""

from __future__ import annotations

import pytest
from temporalio.client import Client

from ringflow.simulation.livekit_fake import FakeLiveKit
from ringflow.workflows.journey_client import JourneyHandle
from tests.support.apikit import api_client, api_settings, new_key
from tests.support.campaignkit import fake_line
from tests.support.journeykit import journey_agent, journey_with_follow_up, phone
from tests.support.wfkit import running_worker, start, wait_state, wait_until

PROBLEM = "application/problem+json"


async def test_supervisor_actions_are_recorded_refused_with_the_reason_and_listen_gives_a_hidden_token(
    temporal_client: Client, task_queue: str, sqlite_url: str, lk: FakeLiveKit
) -> None:
    settings = api_settings(
        sqlite_url,
        task_queue,
        livekit_url=lk.url,
        livekit_api_key=lk.api_key,
        livekit_api_secret=lk.api_secret,
    )
    key = new_key(sqlite_url, "calls:read", "calls:supervise")
    reader = new_key(sqlite_url, "calls:read", "calls:write")
    async with (
        running_worker(temporal_client, task_queue, sqlite_url),
        api_client(settings, temporal_client, key) as http,
    ):
        call = await start(temporal_client, task_queue, room="room-api-listen")
        base = f"/v1/calls/{call.call_id}"
        early = await http.post(f"{base}/whisper", json={"text": "Offer Tuesday."})
        assert early.status_code == 409 and early.headers["content-type"] == PROBLEM
        assert "not live yet" in early.json()["detail"]
        await call.attach("agent-api")
        await wait_state(call, lambda s: s.status == "live", what="live")

        lk.add_room("room-api-listen", participants=("sip-caller",))
        heard = await http.post(f"{base}/listen", json={"identity": "sup-ann", "ttl_s": 600})
        assert heard.status_code == 200, heard.text
        grant = heard.json()
        assert (grant["room"], grant["identity"], grant["url"], grant["ttl_s"]) == (
            "room-api-listen",
            "sup-ann",
            lk.url,
            600,
        )
        joined = lk.join(grant["token"])
        assert joined.identity == "sup-ann" and joined.permission.hidden
        assert joined.permission.can_subscribe and not joined.permission.can_publish
        async with api_client(api_settings(sqlite_url, task_queue), temporal_client, key) as bare:
            no_livekit = await bare.post(f"{base}/listen")
        assert no_livekit.status_code == 503 and "LIVEKIT_URL" in no_livekit.json()["detail"]
        too_long = await http.post(f"{base}/listen", json={"ttl_s": 999999})
        assert too_long.status_code == 422 and too_long.json()["errors"][0]["field"] == "ttl_s"

        hint = await http.post(f"{base}/whisper", json={"text": "Offer Tuesday."})
        assert hint.status_code == 200, hint.text
        assert hint.json() | {"at": 0} == {
            "call_id": call.call_id,
            "id": 1,
            "action": "whisper",
            "text": "Offer Tuesday.",
            "node": None,
            "by": "test",  # the API key's name
            "at": 0,
            "takeover": False,
        }
        took = await http.post(
            f"/v1/calls/call-{call.call_id}/takeover", json={"by": "ann", "identity": "sup-ann", "ttl_s": 900}
        )
        assert took.status_code == 200 and took.json()["takeover"] is True, took.text
        voice = took.json()["voice"]  # the token to speak to the caller with
        assert (voice["room"], voice["identity"], voice["url"], voice["ttl_s"]) == (
            "room-api-listen",
            "sup-ann",
            lk.url,
            900,
        )
        speaker = lk.join(voice["token"])
        assert not speaker.permission.hidden and speaker.permission.can_publish
        assert not speaker.permission.can_publish_data
        assert dict(speaker.attributes) == {"ringflow.role": "supervisor"}
        shown = await http.get(base)
        assert shown.json()["status"] == "takeover"
        during = await http.post(f"{base}/whisper", json={"text": "Hi"})
        assert during.status_code == 409 and "hand it back before whispering" in during.json()["detail"]
        again = await http.post(f"{base}/takeover")
        assert again.status_code == 409 and "taken over already (by ann)" in again.json()["detail"]
        nowhere = await http.post(f"{base}/handback", json={"node": "nowhere"})
        assert nowhere.status_code == 409
        assert "handback refused: the flow has no node 'nowhere'" in nowhere.json()["detail"]
        once = {"Idempotency-Key": "hand-1"}
        back = await http.post(f"{base}/handback", json={"node": "offer", "by": "ann"}, headers=once)
        repeat = await http.post(f"{base}/handback", json={"node": "offer", "by": "ann"}, headers=once)
        assert back.status_code == repeat.status_code == 200, back.text
        assert back.json() == repeat.json() and repeat.headers["Idempotent-Replayed"] == "true"
        assert back.json()["node"] == "offer" and back.json()["takeover"] is False
        nothing = await http.post(f"{base}/handback")
        assert nothing.status_code == 409 and "nothing to hand back" in nothing.json()["detail"]
        long = await http.post(f"{base}/whisper", json={"text": "x" * 2001})
        assert long.status_code == 422 and long.json()["errors"][0]["field"] == "text"
        unknown = await http.post("/v1/calls/nosuchcall/whisper", json={"text": "Hi"})
        unheard = await http.post("/v1/calls/nosuchcall/listen")
        assert unknown.status_code == unheard.status_code == 404
        assert unknown.json()["errors"][0]["field"] == "path.call_id"
        unscoped = await http.post(f"{base}/takeover", headers={"Authorization": f"Bearer {reader}"})
        assert unscoped.status_code == 403 and "calls:supervise" in unscoped.json()["detail"]

        seen = await call.supervision()
        assert [(s.id, s.action, s.by, s.node, s.text) for s in seen.actions] == [
            (1, "whisper", "test", None, "Offer Tuesday."),
            (2, "takeover", "ann", None, None),
            (3, "handback", "ann", "offer", None),  # once: the repeat was the first answer
        ]
        await call.hangup()
        await wait_state(call, lambda s: s.status == "ended", what="ended")
        late = await http.post(f"{base}/whisper", json={"text": "Too late"})
        assert late.status_code == 409 and "has ended" in late.json()["detail"], late.text
        gone = await http.post(f"{base}/listen")
        assert gone.status_code == 409 and "has ended" in gone.json()["detail"], gone.text


async def test_journeys_are_listed_shown_with_their_calls_and_cancelled(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    settings = api_settings(sqlite_url, task_queue)
    key = new_key(sqlite_url, "journeys:read", "journeys:write", "calls:read")
    reader = new_key(sqlite_url, "journeys:read")
    async with (
        fake_line(monkeypatch) as lk,
        journey_agent(temporal_client, lk, ["later"]),
        running_worker(temporal_client, task_queue, sqlite_url),
        api_client(settings, temporal_client, key) as http,
    ):
        j = await journey_with_follow_up(temporal_client, task_queue, phone(181))

        async def listed() -> list[dict[str, object]] | None:
            got = await http.get("/v1/journeys", params={"flow": "check_in", "status": "scheduled"})
            assert got.status_code == 200, got.text
            rows = got.json()["data"]
            return rows if any(r["id"] == j.journey_id for r in rows) else None

        rows = await wait_until(listed, what="the journey listed as scheduled")
        row = next(r for r in rows if r["id"] == j.journey_id)
        assert (row["flow"], row["status"], row["workflow"]) == ("check_in", "scheduled", "RUNNING")
        other = await http.get("/v1/journeys", params={"flow": "no_such_flow"})
        assert other.status_code == 200 and other.json()["data"] == []
        bad = await http.get("/v1/journeys", params={"status": "sleeping"})
        assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "query.status"

        shown = await http.get(f"/v1/journeys/{j.journey_id}")
        assert shown.status_code == 200, shown.text
        doc = shown.json()
        assert doc["id"] == j.journey_id and doc["flow"] == "check_in" and doc["calls_total"] == 1
        first = doc["calls"][0]
        assert first["n"] == 1 and first["node"] == "goodbye" and "completed at goodbye" in first["summary"]
        assert doc["follow_up"]["node"] == "check_in" and doc["follow_up"]["asked_by"] == first["call_id"]
        call = await http.get(f"/v1/calls/{first['call_id']}")  # the timeline's calls are calls
        assert call.status_code == 200 and call.json()["status"] == "ended"
        missing = await http.get("/v1/journeys/journey-check_in-nope")
        assert missing.status_code == 404 and missing.headers["content-type"] == PROBLEM

        refused = await http.post(
            f"/v1/journeys/{j.journey_id}/cancel", headers={"Authorization": f"Bearer {reader}"}
        )
        assert refused.status_code == 403 and "journeys:write" in refused.json()["detail"]
        cancelled = await http.post(f"/v1/journeys/{j.journey_id}/cancel", headers={"Idempotency-Key": "c-1"})
        assert cancelled.status_code == 202 and cancelled.json() == {"id": j.journey_id, "cancelled": True}
        view = await JourneyHandle(temporal_client, j.journey_id).result()
        assert view.end == "cancelled" and view.follow_up is None
        replayed = await http.post(f"/v1/journeys/{j.journey_id}/cancel", headers={"Idempotency-Key": "c-1"})
        assert replayed.status_code == 202 and replayed.headers["Idempotent-Replayed"] == "true"
        ended = await http.post(f"/v1/journeys/{j.journey_id}/cancel")
        assert ended.status_code == 409 and "has ended already (cancelled)" in ended.json()["detail"]
        unknown = await http.post("/v1/journeys/journey-check_in-nope/cancel")
        assert unknown.status_code == 404
