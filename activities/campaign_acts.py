"""The campaign workflow's activities: rounds (outcomes, claiming contacts, pacing, the last
checks before a dial), following calls across continue-as-new, the counts and the
campaign-finished webhook.

A campaign's history is what bounds how many contacts one run holds, so the work is done in
rounds (``campaign_round``): one activity records the outcomes of the calls that ended
since the last round, gives back attempts the workflow did not dial, claims the next batch
of due contacts, paces each on the trunk and makes the last checks; the workflow then
starts the batch's calls (with ``lead_s``: the round comes back that long before its first
slot, each call with its slot, and the call's dial waits for it).

Pacing is one limiter per trunk in Redis, shared by every campaign and worker using the
trunk (``activities/trunk_pace.py``): each attempt reserves the next free slot (a little
over ``1/cps`` after the trunk's last one, on Redis' own clock) and its dial waits for it. A
campaign needs Redis; without it the round fails saying so, and the campaign pauses.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from typing import Any

import httpx
from pydantic import BaseModel, Field, SecretStr
from redis.asyncio import Redis
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from ringflow.activities import campaign_store as store
from ringflow.activities.campaign_rules import RetryRule, Windows
from ringflow.activities.db_work import DB_WORK
from ringflow.activities.trunk_pace import reserve_slot_at
from ringflow.activities.webhook import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    sign,
)
from ringflow.contract.call import call_workflow_id
from ringflow.contract.ids import journey_workflow_id

REDIS_REQUIRED = (
    "campaign pacing needs Redis (one limiter per trunk, shared by every campaign): set RINGFLOW_REDIS_URL"
)


class Attempt(BaseModel):
    idx: int
    attempt: int


class Ended(Attempt):
    """A call that ended, waiting for the next round to record it."""

    outcome: store.Outcome
    retry_at: float | None = None  # the earliest it could be due again (the workflow's guess)


class RoundRequest(BaseModel):
    campaign_id: str
    claim_key: str
    limit: int = Field(ge=0)  # 0: only record and give back
    windows: Windows
    max_attempts: int
    trunk: str
    cps: float = Field(gt=0)
    ended: list[Ended] = []
    release: list[Attempt] = []
    retry: dict[str, RetryRule] = {}
    time_scale: float = 1.0
    # The round returns ``lead_s`` before its first slot, each call with its slot, and the
    # dial waits for it (``Dial.not_before``).
    lead_s: float = Field(ge=0, le=15)
    # a campaign of journeys: its flow's name, each contact ready gets its journey's id
    journeys_of: str | None = None


class RoundResult(BaseModel):
    ready: list[store.Claimed]  # past their slot and the last checks: to dial now
    skipped: dict[str, int] = {}  # claimed but not dialed, by why (dnc, window)
    states: dict[str, int] = {}  # the recorded outcomes' contacts, by their new state
    next_due: float | None  # the earliest a contact not claimed now is due; None: none left
    retry_at: float | None = None  # the earliest retry this round's outcomes scheduled
    out_of_window: int = 0


class FinishedRequest(BaseModel):
    campaign_id: str
    flow: str
    status: str
    stats: dict[str, int]


async def _sleep_until(at: float) -> None:
    """Sleep until ``at`` (monotonic), heartbeating: a lost worker's round is noticed and retried."""
    while (left := at - time.monotonic()) > 0:
        await asyncio.sleep(min(left, 5.0))
        activity.heartbeat()


class CampaignActivities:
    def __init__(
        self,
        database_url: str,
        redis_url: str | None,
        client: Client | None = None,
        webhook_url: str | None = None,
        webhook_secret: SecretStr | None = None,
        journey_secret: bytes | None = None,
    ) -> None:
        self.database_url = database_url
        self.redis_url = redis_url
        self.client = client
        self.webhook_url = webhook_url
        self.webhook_secret = webhook_secret.get_secret_value() if webhook_secret else None
        self.journey_secret = journey_secret  # keys a journey's id (``contract/ids.py``)
        self._redis: Redis | None = None

    def all(self) -> list[Any]:
        return [
            self.campaign_round,
            self.campaign_await_calls,
            self.campaign_await_journeys,
            self.campaign_counts,
            self.campaign_finished,
        ]

    def _pacer(self) -> Redis:
        if not self.redis_url:
            raise ApplicationError(REDIS_REQUIRED, type="RedisRequired", non_retryable=True)
        if self._redis is None:
            self._redis = Redis.from_url(self.redis_url)
        return self._redis

    @activity.defn(name="campaign_round")
    async def campaign_round(self, req: RoundRequest) -> RoundResult:
        """Record, give back, claim, pace, check; safe to retry (each step is keyed)."""
        redis = self._pacer() if req.limit else None  # before anything is written
        states, retry_at = await DB_WORK.run(self._record, req)
        claim = await self._claim(req.campaign_id, req.claim_key, req.limit, req.windows, req.max_attempts)
        ready: list[store.Claimed] = []
        skipped: Counter[str] = Counter()
        if claim.claimed:
            assert redis is not None
            # The batch's slots are reserved together, so a round that follows this one
            # while it waits reserves the slots right after them: the pace stays even.
            # Back ``lead_s`` before the first slot: the calls start ahead and each dial
            # waits for its slot, so neither the workflow's tasks nor a continue-as-new
            # shorter than the lead delay a dial. The last checks run now, for the slot's
            # time (the window), and the attempt row gets its slot as its dial time.
            start = time.monotonic()
            slots = [await reserve_slot_at(redis, req.trunk, req.cps) for _ in claim.claimed]
            await _sleep_until(start + slots[0][1] - req.lead_s)
            for c, (slot, _) in zip(claim.claimed, slots, strict=True):
                verdict = await self._predial(req, c, slot)
                if verdict == "go":
                    jid = None
                    if req.journeys_of is not None:
                        jid = journey_workflow_id(req.journeys_of, c.phone, self.journey_secret)
                    ready.append(c.model_copy(update={"slot": slot, "journey_id": jid}))
                else:
                    skipped[verdict] += 1
        return RoundResult(
            ready=ready,
            skipped=dict(skipped),
            states=dict(states),
            next_due=claim.next_due,
            retry_at=retry_at,
            out_of_window=claim.out_of_window,
        )

    async def _predial(self, req: RoundRequest, c: store.Claimed, at: float) -> str:
        return await DB_WORK.run(
            store.predial, self.database_url, req.campaign_id, c.idx, c.attempt, req.windows, at
        )

    def _record(self, req: RoundRequest) -> tuple[Counter[str], float | None]:
        states: Counter[str] = Counter()
        retry_at: float | None = None
        for e in req.ended:
            state, next_at = store.record_outcome(
                self.database_url,
                req.campaign_id,
                e.idx,
                e.attempt,
                e.outcome,
                req.retry,
                req.max_attempts,
                req.time_scale,
                time.time(),
            )
            states[state] += 1
            if next_at is not None:
                retry_at = next_at if retry_at is None else min(retry_at, next_at)
        for a in req.release:
            store.release(self.database_url, req.campaign_id, a.idx, a.attempt, time.time())
        return states, retry_at

    @activity.defn(name="campaign_await_calls")
    async def campaign_await_calls(self, call_ids: list[str]) -> dict[str, store.Outcome]:
        """Calls an earlier run of the campaign started (before continue-as-new): once one has
        ended, every one that ends within the next second, by call id (one activity for
        many calls, not one each)."""
        return await self._await([(cid, call_workflow_id(cid)) for cid in call_ids])

    @activity.defn(name="campaign_await_journeys")
    async def campaign_await_journeys(self, journey_ids: list[str]) -> dict[str, store.Outcome]:
        """As ``campaign_await_calls``, for the journeys of a campaign of journeys."""
        return await self._await([(jid, jid) for jid in journey_ids], journey=True)

    async def _await(self, ids: list[tuple[str, str]], journey: bool = False) -> dict[str, store.Outcome]:
        """(key, workflow id) each: once one has ended, every one ending within a second after."""
        tasks: dict[asyncio.Future[store.Outcome], str] = {
            asyncio.ensure_future(self._outcome(wid, journey)): key for key, wid in ids
        }
        try:
            done: set[asyncio.Future[store.Outcome]] = set()
            while not done:
                done, _ = await asyncio.wait(tasks, timeout=10.0, return_when=asyncio.FIRST_COMPLETED)
                activity.heartbeat()
            done, _ = await asyncio.wait(tasks, timeout=1.0, return_when=asyncio.ALL_COMPLETED)
            return {tasks[t]: t.result() for t in done}
        finally:
            for t in tasks:
                t.cancel()

    async def _outcome(self, workflow_id: str, journey: bool = False) -> store.Outcome:
        assert self.client is not None, "the worker gives campaign activities a client"
        try:
            rec = await self.client.get_workflow_handle(workflow_id).result()
        except Exception as exc:  # the call's workflow failed: the attempt ended in error
            return store.Outcome(end_reason="error", disposition=str(exc)[:200])
        rec = rec if isinstance(rec, dict) else rec.model_dump()
        if journey:
            return store.journey_outcome(rec)
        return store.Outcome(
            end_reason=rec.get("end_reason") or "error",
            disposition=rec.get("disposition"),
            extracted=rec.get("extracted") or {},
        )

    async def _claim(
        self, campaign_id: str, key: str, limit: int, windows: Windows, max_attempts: int
    ) -> store.ClaimResult:
        return await DB_WORK.run(
            store.claim, self.database_url, campaign_id, key, limit, windows, max_attempts, time.time()
        )

    @activity.defn(name="campaign_counts")
    async def campaign_counts(self, campaign_id: str) -> dict[str, dict[str, int]]:
        return await DB_WORK.run(store.counts, self.database_url, campaign_id)

    @activity.defn(name="campaign_finished")
    async def campaign_finished(self, req: FinishedRequest) -> str:
        """The campaign-finished webhook, signed like the post-call one (Standard Webhooks)."""
        if not self.webhook_url:
            return "skipped"
        body = req.model_dump_json().encode()
        msg_id = f"msg_{uuid.uuid5(uuid.NAMESPACE_URL, 'campaign:' + req.campaign_id).hex}"
        stamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            DELIVERY_HEADER: msg_id,
            EVENT_HEADER: "campaign.finished",
            TIMESTAMP_HEADER: str(stamp),
        }
        if self.webhook_secret:
            headers[SIGNATURE_HEADER] = sign(msg_id, stamp, body, self.webhook_secret)
        async with httpx.AsyncClient(timeout=10.0, follow_redirects=False) as http:
            resp = await http.post(self.webhook_url, content=body, headers=headers)
        if resp.status_code >= 300:
            raise ApplicationError(f"campaign webhook answered {resp.status_code}", type="WebhookRejected")
        return "sent"
