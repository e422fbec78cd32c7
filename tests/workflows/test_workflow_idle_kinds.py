"""The workflow's side of empty input (issue 15, section 3): an idle event's kind is
applied by the workflow's engine, each kind counts toward the idle rule, and a kind that
is not one is recorded as rejected without failing a workflow task or counting. Real
Temporal dev server and worker; the agent is played by sequenced signals (tests/wfkit)."""

from __future__ import annotations

import time

from temporalio.client import Client

from ringflow.contract.events import CallEvent
from tests.support.hostile import finished, worker_with_hooks
from tests.support.wfkit import Agent, start, wait_state


async def test_each_kind_counts_a_bad_kind_is_refused_and_the_third_empty_input_ends_the_call(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with worker_with_hooks(temporal_client, task_queue, sqlite_url) as hooks:
        call = await start(temporal_client, task_queue)
        agent = Agent(call)
        events, bad = [], []
        for kind in ("shrug", "x" * 5000, "empty_turn", "empty_transcript", None):
            eid, seq = agent.next()
            if kind is not None and kind.startswith(("shrug", "x")):
                bad.append(eid)
            events.append(
                CallEvent(
                    event_id=eid,
                    seq=seq,
                    kind="user_idle",
                    at=time.time(),
                    data={} if kind is None else {"kind": kind},
                ).model_dump(mode="json")
            )
        await call.handle.signal("events", {"events": events[:4]})
        st = await wait_state(call, lambda s: s.next_seq == 5, what="four idle events applied")
        assert st.status == "live" and st.end_reason is None  # two refused, two counted
        refused = {r.event_id: r.reason for r in st.rejected}
        assert set(bad) <= set(refused), refused
        assert all("kind" in refused[e] and len(refused[e]) <= 500 for e in bad)
        await call.handle.signal("events", {"events": events[4:]})  # a silence: the third
        out = await finished(call, hooks, sqlite_url)
    assert out["result"].end_reason == "user_idle"
