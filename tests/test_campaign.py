"""Campaigns end to end: a real CampaignWorkflow on a real Temporal dev server, contacts and
attempts in SQLite or PostgreSQL, pacing in the real Redis, each call a real child
CallWorkflow dialed through the LiveKit telephony code against the protocol-level fake."""

from __future__ import annotations

import pytest
from temporalio.client import Client

from activities import campaign_store as store
from activities.campaign_rules import RetryRule
from activities.search_attributes import RINGFLOW_CAMPAIGN
from tests.campaignkit import REDIS, campaign_input, contacts, fake_line, new_id, run_campaign, stand_in_agent
from tests.wfkit import running_worker


async def test_each_outcome_is_retried_by_its_rule_and_a_reached_contact_is_never_called_again(
        monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, database_url: str) -> None:
    people = ["+12125550101", "+12125550102", "+12125550103", "+12125550104", "+12125550105",
              "+12125550106"]
    async with fake_line(monkeypatch) as lk:
        lk.set_answer(people[1], "busy")
        lk.set_answer(people[2], "no_answer")
        lk.set_answer(people[3], "failed")
        lk.set_answer(people[4], "human")  # the stand-in agent ends it as voicemail
        lk.set_answer(people[5], "human")  # ...and this one as agent_lost
        retry = {"busy": RetryRule(count=2, delay_s=0.2), "no_answer": RetryRule(count=1, delay_s=0.2),
                 "dial_failed": RetryRule(count=0, delay_s=0), "voicemail": RetryRule(count=1, delay_s=0.2),
                 "agent_lost": RetryRule(count=1, delay_s=0.2)}
        cid = new_id()
        inp = campaign_input(cid, new_id("T"), retry=retry, max_concurrent=3, cps=20, max_attempts=5)
        async with running_worker(temporal_client, task_queue, database_url, redis_url=REDIS), \
                stand_in_agent(temporal_client, lk, {people[4]: "voicemail", people[5]: "agent_lost"}):
            handle = await run_campaign(temporal_client, task_queue, database_url, inp, contacts(*people))
            result = await handle.result()
    assert result["status"] == "finished"
    rows = {r["phone"]: r for r in store.report(database_url, cid)}
    assert rows[people[0]]["state"] == "reached" and rows[people[0]]["attempts"] == 1
    busy = rows[people[1]]
    assert (busy["attempts"], busy["outcome"], busy["state"]) == (3, "busy", "failed")
    assert (rows[people[2]]["attempts"], rows[people[2]]["state"]) == (2, "failed")
    assert (rows[people[3]]["attempts"], rows[people[3]]["outcome"]) == (1, "dial_failed")
    assert (rows[people[4]]["attempts"], rows[people[4]]["outcome"]) == (2, "voicemail")
    assert (rows[people[5]]["attempts"], rows[people[5]]["outcome"]) == (2, "agent_lost")
    dialed = [d.sip_call_to for d in lk.dials]
    assert sorted(dialed) == sorted([people[0]] + [people[1]] * 3 + [people[2]] * 2 + [people[3]]
                                    + [people[4]] * 2 + [people[5]] * 2)
    rooms = [d.room_name for d in lk.dials]
    assert len(rooms) == len(set(rooms))  # one dial per attempt
    tries = store.attempts(database_url, cid)
    assert len(tries) == len(dialed) and all(t["status"] == "done" for t in tries)
    desc = await temporal_client.get_workflow_handle(f"call-{tries[0]['call_id']}").describe()
    assert desc.typed_search_attributes.get(RINGFLOW_CAMPAIGN) == cid
