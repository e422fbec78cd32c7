"""Canaries against a real Temporal: new calls of a channel split by a stable hash, a
workflow that watches both sides' outcomes (seeded, simulated call records in the real
database) and rolls a worse candidate back or promotes one that is no worse, by itself."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.client import Client

from ringflow.activities import campaign_store as store
from ringflow.activities import flow_canaries, flow_store
from ringflow.activities.campaign_rules import RetryRule
from ringflow.activities.persistence import upsert_call
from ringflow.callflow.canary import CanaryPolicy, contact_key, side_for
from ringflow.campaigns import campaign_canary
from ringflow.contract.call import CallInput
from ringflow.contract.canary import CanaryView
from ringflow.contract.records import CallRecord
from ringflow.workflows.canary_client import canary_view, start_canary, stop_canary, watch_canary
from tests.support import campaignkit as ck
from tests.support.wfkit import running_worker, wait_until
from tests.workflows.test_flow_versions import published, retasked

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def two_versions(db: str) -> tuple[flow_store.PublishedVersion, flow_store.PublishedVersion]:
    _, v1 = published(db)
    flow_store.promote(db, v1.name, v1.version, "production")
    _, v2 = published(db, retasked("Ask who is speaking, politely."))
    return v1, v2


def ended(call_id: str, fail_rate: float, rng: random.Random) -> CallRecord:
    """One ended call of a side whose calls fail with ``fail_rate`` (else they book)."""
    failed = rng.random() < fail_rate
    length = rng.uniform(5, 15) if failed else rng.gauss(60, 8)
    return CallRecord(
        call_id=call_id,
        workflow_id=f"call-{call_id}",
        flow="clinic_reminder",
        status="ended",
        end_reason="error" if failed else "completed",
        disposition=None if failed else "booked",
        started_at=T0,
        ended_at=T0 + timedelta(seconds=length),
        updated_at=T0 + timedelta(seconds=length),
    )


def take_calls(db: str, n: int, rates: dict[str, float], seed: int) -> dict[str, int]:
    """``n`` new calls of ``clinic_reminder@production``, resolved as any caller resolves
    them, each ending as its side's rate says; how many went to each side."""
    rng = random.Random(seed)
    counts = {"candidate": 0, "baseline": 0}
    for i in range(n):
        pin = flow_canaries.resolve_call(db, "clinic_reminder@production", f"c{seed}-{i}")
        assert pin.side is not None
        counts[pin.side] += 1
        upsert_call(db, ended(f"c{seed}-{i}", rates[pin.side], rng))
    return counts


@pytest.mark.timeout(120)
async def test_a_worse_candidate_is_rolled_back_by_its_workflow(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    v1, v2 = two_versions(sqlite_url)
    canary = flow_canaries.start_canary(sqlite_url, f"{v2.name}@{v2.version}", 30, "production")
    assert canary.baseline == v1.version
    counts = take_calls(sqlite_url, 400, {"candidate": 0.3, "baseline": 0.02}, seed=1)
    assert 90 < counts["candidate"] < 150  # 30% of 400, by the hash
    async with running_worker(temporal_client, task_queue, sqlite_url):
        await watch_canary(temporal_client, sqlite_url, canary, task_queue=task_queue, check_every_s=0.5)
        handle = temporal_client.get_workflow_handle(canary.workflow_id, result_type=CanaryView)
        done = await handle.result()
    assert done.status == "rolled_back" and done.verdict is not None
    assert "failed_rate" in done.verdict.reason and "worse" in done.verdict.reason
    assert (
        done.candidate_stats.calls == counts["candidate"] and done.baseline_stats.calls == counts["baseline"]
    )
    row = flow_canaries.get_canary(sqlite_url, canary.canary_id)
    assert row is not None and row.state == "rolled_back" and row.reason == done.verdict.reason
    # the channel stays, and new calls are no longer split
    assert flow_store.channels(sqlite_url, v1.name)["production"] == v1.version
    pins = [
        flow_canaries.resolve_call(sqlite_url, "clinic_reminder@production", f"after-{i}") for i in range(30)
    ]
    assert {p.version.version for p in pins} == {v1.version} and {p.side for p in pins} == {None}

    # found in the Temporal UI by its search attributes
    async def listed() -> bool:
        query = (
            "WorkflowType = 'FlowCanaryWorkflow' AND RingflowFlow = 'clinic_reminder' "
            "AND RingflowStatus = 'canary_rolled_back'"
        )
        return any([wf.id == canary.workflow_id async for wf in temporal_client.list_workflows(query)])

    await wait_until(listed, what="the canary in visibility")


@pytest.mark.timeout(120)
async def test_a_candidate_whose_calls_refuse_functions_is_rolled_back_for_it(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """Both sides' calls complete alike, but the candidate's flow refuses the LLM's function
    calls on a third of its calls (``CallRecord.refused``, as the workflow records it): the
    canary's workflow rolls it back on refusals alone, and the reason says so."""
    v1, v2 = two_versions(sqlite_url)
    canary = flow_canaries.start_canary(sqlite_url, f"{v2.name}@{v2.version}", 30, "production")
    rng = random.Random(5)
    refusing = 0
    for i in range(400):
        pin = flow_canaries.resolve_call(sqlite_url, "clinic_reminder@production", f"r{i}")
        rec = ended(f"r{i}", 0.0, rng)
        odds = 0.35 if pin.side == "candidate" else 0.01
        rec.refused = 2 if rng.random() < odds else 0
        refusing += pin.side == "candidate" and rec.refused > 0
        upsert_call(sqlite_url, rec)
    async with running_worker(temporal_client, task_queue, sqlite_url):
        await watch_canary(temporal_client, sqlite_url, canary, task_queue=task_queue, check_every_s=0.5)
        done = await temporal_client.get_workflow_handle(canary.workflow_id, result_type=CanaryView).result()
    assert done.status == "rolled_back" and done.verdict is not None
    assert "refused_rate (calls with a function call refused)" in done.verdict.reason, done.verdict.reason
    assert "failed_rate" not in done.verdict.reason
    assert done.candidate_stats.refused == refusing and done.candidate_stats.refusals == 2 * refusing
    assert flow_store.channels(sqlite_url, v1.name)["production"] == v1.version  # the channel stays


@pytest.mark.timeout(120)
async def test_a_candidate_no_worse_is_promoted_by_its_workflow(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    v1, v2 = two_versions(sqlite_url)
    policy = CanaryPolicy(min_calls=150, margin=0.1, duration_margin=0.3)
    canary = flow_canaries.start_canary(sqlite_url, f"{v2.name}@{v2.version}", 50, "production", policy)
    counts = take_calls(sqlite_url, 900, {"candidate": 0.02, "baseline": 0.02}, seed=2)
    async with running_worker(temporal_client, task_queue, sqlite_url):
        await watch_canary(temporal_client, sqlite_url, canary, task_queue=task_queue, check_every_s=0.5)
        done = await temporal_client.get_workflow_handle(canary.workflow_id, result_type=CanaryView).result()
    assert done.status == "promoted", done.verdict
    assert done.verdict is not None and "no worse" in done.verdict.reason
    assert done.candidate_stats.calls == counts["candidate"]
    assert flow_store.channels(sqlite_url, v1.name)["production"] == v2.version  # promoted
    assert flow_canaries.resolve_call(sqlite_url, "clinic_reminder", "next").version.version == v2.version
    # a settled canary's status comes from its history, no worker needed
    again = flow_canaries.get_canary(sqlite_url, canary.canary_id)
    assert again is not None and (await canary_view(temporal_client, again)).status == "promoted"


@pytest.mark.timeout(120)
async def test_the_split_keeps_a_call_on_its_side_and_a_stop_rolls_back(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    v1, v2 = two_versions(sqlite_url)
    async with running_worker(temporal_client, task_queue, sqlite_url):
        canary = await start_canary(
            temporal_client,
            sqlite_url,
            f"{v2.name}@{v2.version}",
            50,
            "production",
            task_queue=task_queue,
            check_every_s=3600,
        )
        first = [flow_canaries.resolve_call(sqlite_url, "clinic_reminder", f"k{i}") for i in range(40)]
        again = [
            flow_canaries.resolve_call(sqlite_url, "clinic_reminder@production", f"k{i}") for i in range(40)
        ]
        assert [p.side for p in first] == [p.side for p in again]  # a retried call keeps its side
        assert {p.version.version for p in first} == {v1.version, v2.version}
        for p in first:
            assert p.version.version == (v2.version if p.side == "candidate" else v1.version)
        # an exact version is never split
        exact = flow_canaries.resolve_call(sqlite_url, f"clinic_reminder@{v1.version}", "k0")
        assert exact.side is None and exact.version.version == v1.version
        # a second canary on the same channel is refused while this one runs
        with pytest.raises(flow_canaries.CanaryError, match="is running"):
            flow_canaries.start_canary(sqlite_url, f"{v2.name}@{v2.version}", 10, "production")

        async def looked() -> bool:
            return (await canary_view(temporal_client, canary)).checks >= 1

        await wait_until(looked, what="the canary's first look")
        await stop_canary(temporal_client, canary, "the prompt reads badly")
        done = await temporal_client.get_workflow_handle(canary.workflow_id, result_type=CanaryView).result()
    assert done.status == "rolled_back" and done.verdict is not None
    assert done.verdict.reason == "stopped: the prompt reads badly"
    assert flow_store.channels(sqlite_url, v1.name)["production"] == v1.version


def test_a_canary_that_cannot_start_says_why(sqlite_url: str) -> None:
    v1, v2 = two_versions(sqlite_url)
    cases = {
        "clinic_reminder@production": "takes NAME@VERSION",
        f"clinic_reminder@{'0' * 12}": "is not published",
    }
    for ref, says in cases.items():
        with pytest.raises(flow_canaries.CanaryError, match=says):
            flow_canaries.start_canary(sqlite_url, ref, 10, "production")
    with pytest.raises(flow_canaries.CanaryError, match=r"no channel 'beta'.*channels: production"):
        flow_canaries.start_canary(sqlite_url, f"{v2.name}@{v2.version}", 10, "beta")
    with pytest.raises(flow_canaries.CanaryError, match="already serves"):
        flow_canaries.start_canary(sqlite_url, f"{v1.name}@{v1.version}", 10, "production")
    with pytest.raises(flow_canaries.CanaryError, match="--percent 0"):
        flow_canaries.start_canary(sqlite_url, f"{v2.name}@{v2.version}", 0, "production")


def test_the_split_is_recorded_on_either_database(database_url: str) -> None:
    """SQLite and PostgreSQL: the side of a call is recorded once and read back."""
    v1, v2 = two_versions(database_url)
    canary = flow_canaries.start_canary(database_url, f"{v2.name}@{v2.version}", 50, "production")
    first = {f"d{i}": flow_canaries.resolve_call(database_url, "clinic_reminder", f"d{i}") for i in range(20)}
    for call_id, pin in first.items():
        again = flow_canaries.resolve_call(database_url, "clinic_reminder@production", call_id)
        assert (again.side, again.version.version, again.canary_id) == (
            pin.side,
            pin.version.version,
            canary.canary_id,
        )
    assert {p.side for p in first.values()} == {"candidate", "baseline"}
    done = flow_canaries.settle(database_url, canary.canary_id, "promote", "by hand")
    assert done.state == "promoted" and flow_store.channels(database_url, v1.name)["production"] == v2.version
    assert flow_canaries.settle(database_url, canary.canary_id, "rollback", "again").state == "promoted"


@pytest.mark.timeout(180)
async def test_a_campaign_on_a_canarys_channel_splits_its_contacts_by_the_same_hash(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """A campaign that names ``clinic_reminder@production`` while a canary runs there: each
    contact's calls run the side its stable hash gives (the retried contact's two attempts
    too), their inputs name that version, and the canary counts each call on its side."""
    v1, v2 = two_versions(sqlite_url)
    canary = flow_canaries.start_canary(sqlite_url, f"{v2.name}@{v2.version}", 50, "production")
    split = campaign_canary(sqlite_url, "clinic_reminder@production")
    assert split is not None and split.flow_ref.version == v2.version and split.canary_id == canary.canary_id
    assert campaign_canary(sqlite_url, f"clinic_reminder@{v1.version}") is None  # an exact version: no split
    people = [f"+1212555{n:04d}" for n in range(190, 200)]
    cid = ck.new_id()
    inp = ck.campaign_input(cid, ck.new_id("T"), retry={"busy": RetryRule(count=1, delay_s=0.5)}, cps=20)
    baseline_def = flow_store.load_definition(sqlite_url, v1.name, v1.version)
    inp = inp.model_copy(update={"definition": baseline_def, "flow_ref": v1.ref, "canary": split})
    async with ck.fake_line(monkeypatch) as lk:
        lk.set_answer(people[0], "busy")
        async with (
            running_worker(temporal_client, task_queue, sqlite_url, redis_url=ck.REDIS),
            ck.stand_in_agent(temporal_client, lk, {}),
        ):
            handle = await ck.run_campaign(temporal_client, task_queue, sqlite_url, inp, ck.contacts(*people))
            assert (await handle.result())["status"] == "finished"
    tries = store.attempts(sqlite_url, cid)
    assert len(tries) == len(people) + 1  # one each, and the busy contact's retry
    sides: dict[int, set[str]] = {}
    for t in tries:
        call_inp = await started_input(temporal_client, t["call_id"])
        side = side_for(canary.canary_id, contact_key(cid, t["idx"]), 50)
        want = v2 if side == "candidate" else v1
        assert call_inp.flow_ref is not None and call_inp.flow_ref.version == want.version
        assert call_inp.definition.flow.nodes["verify"].task == (
            flow_store.load_definition(sqlite_url, want.name, want.version).flow.nodes["verify"].task
        )
        assert call_inp.canary is not None and call_inp.canary.side == side
        sides.setdefault(t["idx"], set()).add(side)
    assert all(len(s) == 1 for s in sides.values())  # the retried contact kept its side
    assert {s for ss in sides.values() for s in ss} == {"candidate", "baseline"}
    cand, base = flow_canaries.side_stats(sqlite_url, canary.canary_id)
    by_side = [side_for(canary.canary_id, contact_key(cid, t["idx"]), 50) for t in tries]
    assert (cand.calls, base.calls) == (by_side.count("candidate"), by_side.count("baseline"))


async def started_input(client: Client, call_id: str) -> CallInput:
    """A call's input as its workflow started with it (decoded: the definition put back)."""
    history = await client.get_workflow_handle(f"call-{call_id}").fetch_history()
    payload = history.events[0].workflow_execution_started_event_attributes.input.payloads[0]
    decoded = (await client.data_converter.decode([payload], [CallInput]))[0]
    assert isinstance(decoded, CallInput)
    return decoded


@pytest.mark.timeout(180)
async def test_a_running_campaign_ends_its_split_when_the_canary_settles(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """A campaign split by a canary that is promoted while the campaign dials: the calls
    started before run the side their hash gives (pinned to the canary), every call started
    after the campaign saw the promotion runs the candidate, unpinned, whatever its hash."""
    v1, v2 = two_versions(sqlite_url)
    canary = flow_canaries.start_canary(sqlite_url, f"{v2.name}@{v2.version}", 50, "production")
    split = campaign_canary(sqlite_url, "clinic_reminder@production")
    assert split is not None
    people = [f"+1212556{n:04d}" for n in range(10)]
    cid = ck.new_id()
    while {side_for(canary.canary_id, contact_key(cid, i), 50) for i in range(1, 10)} != {
        "candidate",
        "baseline",
    }:
        cid = ck.new_id()  # (1 in 256) the split would have sent the later ones to both sides
    inp = ck.campaign_input(cid, ck.new_id("T"), cps=20, max_concurrent=1)
    baseline_def = flow_store.load_definition(sqlite_url, v1.name, v1.version)
    inp = inp.model_copy(
        update={"definition": baseline_def, "flow_ref": v1.ref, "canary": split, "drive_s": 0.5}
    )
    hold = set(people)  # the one call the campaign may have live stays on until the promotion is seen
    async with ck.campaign_line(monkeypatch, temporal_client, task_queue, sqlite_url, hold=hold) as lk:
        handle = await ck.run_campaign(temporal_client, task_queue, sqlite_url, inp, ck.contacts(*people))

        async def first_live() -> bool:
            return any([await ck.live_on(temporal_client, lk, p) for p in people])

        await wait_until(first_live, what="the first call live")
        assert (await ck.progress(handle))["canary"]["settled"] is None
        flow_canaries.settle(sqlite_url, canary.canary_id, "promote", "by hand")

        async def seen() -> bool:
            return (await ck.progress(handle))["canary"]["settled"] == "promoted"

        await wait_until(seen, what="the campaign seeing the promotion")
        hold.clear()
        assert (await handle.result())["status"] == "finished"
    tries = store.attempts(sqlite_url, cid)  # in the order they were claimed
    assert len(tries) == len(people) and len(lk.dials) == len(people)
    first, *after = [await started_input(temporal_client, t["call_id"]) for t in tries]
    side = side_for(canary.canary_id, contact_key(cid, tries[0]["idx"]), 50)
    assert first.canary is not None and first.canary.side == side
    assert (
        first.flow_ref is not None and first.flow_ref.version == (v2 if side == "candidate" else v1).version
    )
    assert {(c.flow_ref.version if c.flow_ref else None, c.canary) for c in after} == {(v2.version, None)}
    cand, base = flow_canaries.side_stats(sqlite_url, canary.canary_id)
    assert cand.calls + base.calls == 1  # only the call started under the split counts for it


def test_a_settled_split_sends_every_contact_to_the_side_it_settled_on(sqlite_url: str) -> None:
    """``CampaignInput.flow_for`` once ``canary_settled`` is set: promoted, each contact runs the
    candidate; rolled back, the campaign's own version; neither pinned to the canary. A
    second answer changes nothing (the first one a drive saw is the one replayed)."""
    v1, v2 = two_versions(sqlite_url)
    flow_canaries.start_canary(sqlite_url, f"{v2.name}@{v2.version}", 50, "production")
    split = campaign_canary(sqlite_url, "clinic_reminder@production")
    assert split is not None
    inp = ck.campaign_input(ck.new_id(), ck.new_id("T")).model_copy(
        update={"flow_ref": v1.ref, "canary": split}
    )
    running = {inp.flow_for(i)[2].side for i in range(40)}  # type: ignore[union-attr]
    assert running == {"candidate", "baseline"}
    assert inp.canary_settled(None) is inp
    promoted = inp.canary_settled("promoted")
    assert {(f.version if f else None, pin) for _, f, pin in map(promoted.flow_for, range(40))} == {
        (v2.version, None)
    }
    assert promoted.canary_settled("rolled_back").canary == promoted.canary
    back = inp.canary_settled("rolled_back")
    assert {(f.version if f else None, pin) for _, f, pin in map(back.flow_for, range(40))} == {
        (v1.version, None)
    }
    assert back.canary is not None and back.canary.settled == "rolled_back"
