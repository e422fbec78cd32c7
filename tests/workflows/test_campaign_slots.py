"""Each attempt's dial keeps its slot on the trunk: a round comes back
``LEAD_S`` before its first slot, the calls start then, and each call's dial waits for its
slot (``Dial.not_before``), so neither the round's batching nor a continue-as-new moves a dial.
Real workflows, real Redis pacing, calls dialed against the LiveKit fake."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from ringflow.activities import campaign_store as store
from ringflow.activities.telephony import TelephonyActivities
from ringflow.contract.dial import Dial, DialRequest, DialResult
from ringflow.workflows.client import workflow_id
from tests.support.campaignkit import campaign_input, campaign_line, contacts, new_id, run_campaign
from tests.support.wfkit import wait_until

# The fake stamps each dial with perf_counter(); the slots are wall-clock (epoch) seconds.
CLOCKS = 0.05  # how far the two clocks' conversion may be off, at most (s)


class _Line:
    def __init__(self) -> None:
        self.dialed_at: list[float] = []

    async def dial(self, req: DialRequest, dialed_before: bool) -> DialResult:
        self.dialed_at.append(time.time())
        return DialResult(outcome="no_answer")


async def test_a_dial_waits_for_its_slot_and_a_late_one_dials_at_once() -> None:
    line = _Line()
    acts = TelephonyActivities(line)  # type: ignore[arg-type]
    slot = time.time() + 0.5
    req = DialRequest(
        call_id="c1", room="c1", identity="sip-c1", dial=Dial(to="+12125550100", not_before=slot)
    )
    await ActivityEnvironment().run(acts.dial_call, req)
    assert line.dialed_at[0] >= slot
    past = req.model_copy(update={"dial": Dial(to="+12125550100", not_before=time.time() - 60)})
    await ActivityEnvironment().run(acts.dial_call, past)  # a slot long gone: no wait, no error
    assert len(line.dialed_at) == 2


async def _not_before(client: Client, call_id: str) -> Any:
    history = await client.get_workflow_handle(workflow_id(call_id)).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    [inp] = await client.data_converter.decode(list(started.input.payloads)[:1], [dict])
    return inp["dial"]["not_before"]


async def test_each_dial_keeps_its_slot_across_continue_as_new(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    people = [f"+1212555{1700 + i}" for i in range(40)]
    cps = 10.0
    async with campaign_line(monkeypatch, temporal_client, task_queue, sqlite_url) as lk:
        cid = new_id()
        inp = campaign_input(cid, new_id("T"), max_concurrent=10, cps=cps)
        # short drives, few events a run: it continues as new
        inp = inp.model_copy(update={"max_history_events": 60, "drive_s": 0.2})
        handle = await run_campaign(temporal_client, task_queue, sqlite_url, inp, contacts(*people))
        result = await handle.result()
        offset = time.time() - time.perf_counter()
        arrived = {d.room_name: t + offset for d, t in zip(lk.dials, lk.dial_times, strict=True)}

        async def runs() -> bool:  # the list (visibility) lags the workflow a little
            listed = [wf async for wf in temporal_client.list_workflows(f"WorkflowId = '{handle.id}'")]
            return len(listed) >= 2

        await wait_until(runs, timeout=60, what="the campaign's runs listed")
        tries = store.attempts(sqlite_url, cid)
        slots = {t["call_id"]: t["dialed_at"] for t in tries}
        children = {cid_: await _not_before(temporal_client, cid_) for cid_ in slots}
    assert result["status"] == "finished"
    assert len(arrived) == len(lk.dials) == len(people)  # each once
    assert children == slots  # the child dials at the slot its attempt row records
    for call_id, slot in slots.items():
        assert arrived[call_id] >= slot - CLOCKS, f"{call_id} dialed before its slot"
    ordered = sorted(slots.values())
    # one slot each on the trunk's pace (Redis keeps whole milliseconds)
    assert all(b - a >= 1 / cps - 0.002 for a, b in itertools.pairwise(ordered))
