"""The circuit breaker: a campaign whose dials fail (telephony down, a trunk refusing calls)
pauses itself after a few, saying why, instead of burning its whole list to ``dial_failed``;
resumed, it dials again."""

from __future__ import annotations

import pytest
from temporalio.client import Client

from ringflow.activities import campaign_store as store
from ringflow.activities.search_attributes import RINGFLOW_STATUS
from ringflow.workflows.campaign import BREAKER_FAILURES
from tests.support.campaignkit import campaign_input, campaign_line, contacts, new_id, progress, run_campaign
from tests.support.wfkit import wait_until

PEOPLE = [f"+1212555{7300 + i}" for i in range(12)]


async def test_a_campaign_whose_dials_fail_pauses_itself_and_says_why(
    monkeypatch: pytest.MonkeyPatch, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    cid = new_id("brk")
    async with campaign_line(monkeypatch, temporal_client, task_queue, sqlite_url) as lk:
        lk.default_answer = "failed"  # every dial refused (SIP 5xx): dial_failed
        inp = campaign_input(cid, "ST_down", max_concurrent=2, cps=4)
        handle = await run_campaign(temporal_client, task_queue, sqlite_url, inp, contacts(*PEOPLE))

        async def paused() -> dict | None:  # type: ignore[type-arg]
            p = await progress(handle)
            return p if p["status"] == "paused" and not p["live"] and not p["starting"] else None

        p = await wait_until(paused, what="the campaign pauses itself")
        assert p["pause_reason"].startswith("circuit breaker: ")
        assert (
            "failed to dial" in p["pause_reason"] and f"ringflow campaign resume {cid}" in p["pause_reason"]
        )
        assert p["stats"]["breaker_tripped"] == 1
        desc = await handle.describe()
        assert desc.typed_search_attributes.get(RINGFLOW_STATUS) == "paused"
        dialed = len(lk.dials)
        assert BREAKER_FAILURES <= dialed < len(PEOPLE)  # the rest of the list is kept
        counts = store.counts(sqlite_url, cid)["contacts"]
        assert counts.get("pending", 0) + counts.get("retry", 0) > 0

        lk.default_answer = "human"  # telephony back: resumed, the campaign dials the rest
        assert await handle.execute_update("resume") == "running"
        result = await wait_until(lambda: handle.result(), what="the campaign finishes")
        assert result["status"] == "finished"
        assert len(lk.dials) == len(PEOPLE)
