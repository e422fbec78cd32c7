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
import contextlib
import math
import time
import uuid
from collections import Counter
from typing import Any, Protocol

import httpx
from pydantic import BaseModel, Field, SecretStr
from redis.asyncio import Redis
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from ringflow.activities import campaign_store as store
from ringflow.activities import flow_canaries
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
    canary_id: str | None = None  # the campaign's canary, not seen settled yet: is it now?


class RoundResult(BaseModel):
    ready: list[store.Claimed]  # past their slot and the last checks: to dial now
    skipped: dict[str, int] = {}  # claimed but not dialed, by why (dnc, window)
    states: dict[str, int] = {}  # the recorded outcomes' contacts, by their new state
    next_due: float | None  # the earliest a contact not claimed now is due; None: none left
    retry_at: float | None = None  # the earliest retry this round's outcomes scheduled
    out_of_window: int = 0
    canary_settled: Settled | None = None  # the request's canary has settled: how


class Started(Attempt):
    """A call a drive started (or followed), not seen ending yet."""

    call_id: str


# The circuit breaker (a drive applies it, the workflow pauses the campaign when it trips):
# telephony down or a trunk refusing every call would otherwise burn the whole list to
# ``dial_failed`` in seconds. It trips once, among the attempts that ended in the last
# BREAKER_WINDOW_S, at least BREAKER_FAILURES failed to dial and they are at least
# BREAKER_SHARE of them; `campaign resume` starts counting afresh.
BREAKER_WINDOW_S = 60.0
BREAKER_FAILURES = 5
BREAKER_SHARE = 0.5
MAX_BATCH = 100
CONTROL_EVERY_S = 1.0  # a drive asks the campaign for pause, cancel and limits this often
# ... and the database whether the campaign's canary has settled, this often (its split ends)
CANARY_EVERY_S = 5.0
Settled = flow_canaries.Settled


class DriveRequest(BaseModel):
    """``campaign_drive``: a round that starts its calls itself and follows them to their end
    (see :meth:`CampaignActivities.campaign_drive`)."""

    campaign_id: str
    campaign_workflow_id: str  # asked (a query, no history event) for pause, cancel and limits
    claim_key: str  # its claims are keyed ``<claim_key>.<try>-<n>``
    windows: Windows
    trunk: str
    max_concurrent: int
    cps: float = Field(gt=0)
    max_attempts: int
    retry: dict[str, RetryRule] = {}
    time_scale: float = 1.0
    lead_s: float = Field(ge=0, le=15)
    budget_s: float = Field(gt=0)  # it returns about this long after it began (or sooner: idle)
    dial: bool = True  # False: paused or cancelled, only follow the live calls to their end
    paused: bool = False  # the campaign's state when the drive began: a change ends the drive
    cancelled: bool = False
    live: list[Started] = []
    to_start: list[store.Claimed] = []  # checked at their slot, their start not confirmed
    ended: list[Ended] = []  # ended, not recorded yet (an earlier design's run carried them)
    release: list[Attempt] = []
    dial_results: list[tuple[float, bool]] = []  # the breaker's: (ended at, failed to dial)
    campaign: dict[str, Any]  # the campaign's input, for the calls' (``CallStarter.campaign``)


class DriveResult(BaseModel):
    live: list[Started]
    dialed: list[float] = []  # each call started now: its slot (epoch s)
    outcomes: dict[str, int] = {}  # the calls that ended, by end reason
    states: dict[str, int] = {}
    skipped: dict[str, int] = {}
    out_of_window: int = 0
    next_due: float | None
    dial_results: list[tuple[float, bool]] = []
    breaker: str | None = None  # why it stopped dialing, when the breaker tripped
    canary_settled: Settled | None = None  # the campaign's canary settled during the drive: how


class CallStarter(Protocol):
    """How a drive starts an attempt's call, as the campaign workflow's child would have been
    (``workflows/campaign_calls.py`` gives the worker's): the activity layer may not build a
    workflow's input itself."""

    def campaign(self, raw: dict[str, Any]) -> Any: ...

    async def start(self, client: Client, campaign: Any, c: store.Claimed, task_queue: str) -> str:
        """``started``, ``exists`` (its id was started before: follow it, never dial again)
        or ``invalid: <why>`` (the contact's variables the flow refuses)."""
        ...


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
        starter: CallStarter | None = None,
    ) -> None:
        self.starter = starter
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
            self.campaign_drive,
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
        settled = None  # read last: the ready contacts' flow is chosen after it
        if req.canary_id is not None:
            settled = await DB_WORK.run(flow_canaries.settled_as, self.database_url, req.canary_id)
        return RoundResult(
            canary_settled=settled,
            ready=ready,
            skipped=dict(skipped),
            states=dict(states),
            next_due=claim.next_due,
            retry_at=retry_at,
            out_of_window=claim.out_of_window,
        )

    async def _predial(self, req: RoundRequest | DriveRequest, c: store.Claimed, at: float) -> str:
        return await DB_WORK.run(
            store.predial, self.database_url, req.campaign_id, c.idx, c.attempt, req.windows, at
        )

    def _record(self, req: RoundRequest | DriveRequest) -> tuple[Counter[str], float | None]:
        return self._record_ended(req, req.ended, req.release)

    def _record_ended(
        self, req: RoundRequest | DriveRequest, ended: list[Ended], release: list[Attempt]
    ) -> tuple[Counter[str], float | None]:
        states: Counter[str] = Counter()
        retry_at: float | None = None
        for e in ended:
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
        for a in release:
            store.release(self.database_url, req.campaign_id, a.idx, a.attempt, time.time())
        return states, retry_at

    @activity.defn(name="campaign_drive")
    async def campaign_drive(self, req: DriveRequest) -> DriveResult:
        """A round that starts its calls itself (``client.start_workflow``) and learns their
        endings, for about ``budget_s``: the campaign's history holds one activity per drive
        instead of a child's events per attempt. See :class:`_Drive`."""
        assert self.client is not None and self.starter is not None, "the worker gives a client and starter"
        return await _Drive(self, req, self.client, self.starter).run()

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


class _Drive:
    """One ``campaign_drive``: claim, pace and check as ``campaign_round`` does, start each
    checked attempt's call under its attempt's id (``REJECT_DUPLICATE``: a retried drive, a
    restarted worker or a continue-as-new starts an id once, so an attempt is never dialed
    twice), follow every live call to its end and record its outcome in the store at once
    (keyed by attempt: recorded once). Concurrency, the breaker, pause, cancel and the
    limits are kept here, between the campaign's workflow tasks: the drive asks the campaign
    (a query, no history event) every ``CONTROL_EVERY_S`` and stops starting calls as soon
    as it is paused or cancelled, giving back what it claimed and did not start.

    Retried after a lost worker, it takes up first what its earlier try claimed and did not
    close (``store.open_attempts``): checked ones are started (or found started), the others
    checked at their slot."""

    def __init__(
        self, acts: CampaignActivities, req: DriveRequest, client: Client, starter: CallStarter
    ) -> None:
        self.acts, self.req, self.client, self.starter = acts, req, client, starter
        self.campaign = starter.campaign(req.campaign)
        self.task_queue = activity.info().task_queue
        self.watch: dict[asyncio.Future[store.Outcome], Started] = {}
        self.live: dict[str, Started] = {}
        self.dialed: list[float] = []
        self.outcomes: Counter[str] = Counter()
        self.states: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()
        self.out_of_window = 0
        self.next_due: float | None = time.time()  # unknown: claim at once
        self.dial_results = list(req.dial_results)
        self.breaker: str | None = None
        self.paused, self.cancelled = req.paused, req.cancelled
        self.limits = (req.max_concurrent, req.cps, req.max_attempts)
        self.asked = 0.0
        self.canary_asked = -CANARY_EVERY_S  # at once
        self.canary_settled: Settled | None = None
        self.woken = asyncio.Event()  # a call ended (the dialing loop looks again)
        self.followed = asyncio.Event()  # a call to follow (the recorder looks again)
        self.starting = 0  # claimed and slotted, being checked and started (``launch``)
        self.launches: list[asyncio.Future[None]] = []

    async def run(self) -> DriveResult:
        req = self.req
        redis = self.acts._pacer() if req.dial else None
        deadline = time.monotonic() + req.budget_s
        for s in req.live:
            self.follow(s)
        recorder = asyncio.ensure_future(self.recorder())
        try:
            states, retry_at = await DB_WORK.run(self.acts._record, req)
            self.states.update(states)
            self.due(retry_at)
            for c in req.to_start:  # checked at their slot in an earlier run
                await self.start(c)
            for status, c in await DB_WORK.run(
                store.open_attempts, self.acts.database_url, req.campaign_id, req.claim_key
            ):
                if status == "dialed":
                    await self.start(c)
                else:
                    await self.check_and_start(c, c.slot or time.time())
            n = 0
            while True:
                if recorder.done():
                    recorder.result()  # it failed (the database): the drive fails, and is retried
                self.woken.clear()
                await self.control()
                now = time.time()
                self.reap()
                free = self.limits[0] - len(self.live) - self.starting
                if self.dialing() and free > 0 and self.next_due is not None and self.next_due <= now:
                    await self.control(now=True)  # a claim given back at once would move the contact
                    if not self.dialing():
                        continue
                    assert redis is not None
                    key = f"{req.claim_key}.{activity.info().attempt}-{n}"
                    n += 1
                    batch = max(1, min(MAX_BATCH, free, math.ceil(self.limits[1])))
                    await self.batch(redis, key, batch)
                    if time.monotonic() >= deadline:
                        break
                    continue
                if time.monotonic() >= deadline or self.changed():
                    break
                left = deadline - time.monotonic()
                due_soon = (
                    self.dialing() and self.next_due is not None and self.next_due - now < left and free > 0
                )
                if not self.live and not due_soon:
                    break  # nothing to follow, nothing due before the budget ends: the workflow waits
                wait = min(CONTROL_EVERY_S, max(0.01, left))
                if due_soon and self.next_due is not None:
                    wait = min(wait, max(0.01, self.next_due - now))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.woken.wait(), wait)
            await asyncio.gather(*self.launches)  # every call this drive started is in ``live``
        finally:
            for t in self.launches:
                t.cancel()
            recorder.cancel()  # a call it was recording stays live: the next drive records it
            with contextlib.suppress(asyncio.CancelledError):
                await recorder
            for f in self.watch:
                f.cancel()
        return DriveResult(
            live=list(self.live.values()),
            dialed=self.dialed,
            outcomes=dict(self.outcomes),
            states=dict(self.states),
            skipped=dict(self.skipped),
            out_of_window=self.out_of_window,
            next_due=self.next_due,
            dial_results=self.dial_results,
            breaker=self.breaker,
            canary_settled=self.canary_settled,
        )

    def dialing(self) -> bool:
        return self.req.dial and not self.paused and not self.cancelled and self.breaker is None

    def changed(self) -> bool:
        """The campaign was paused, resumed or cancelled since the drive began, or it tripped
        the breaker: back to the workflow, which shows it (and drives on as it now says)."""
        return (self.paused, self.cancelled) != (self.req.paused, self.req.cancelled) or (
            self.breaker is not None
        )

    def due(self, at: float | None) -> None:
        if at is not None:
            self.next_due = at if self.next_due is None else min(self.next_due, at)

    async def canary(self) -> None:
        """End the campaign's canary split here once the canary has settled: the calls this
        drive starts from then on run the side it settled on (the workflow, told by the
        result, keeps to it in later drives and runs)."""
        pin = self.req.campaign.get("canary")
        if not pin or pin.get("settled") or time.monotonic() - self.canary_asked < CANARY_EVERY_S:
            return
        self.canary_asked = time.monotonic()
        settled = await DB_WORK.run(flow_canaries.settled_as, self.acts.database_url, str(pin["canary_id"]))
        if settled is not None:
            self.canary_settled = settled
            self.req.campaign["canary"] = {**pin, "settled": settled}
            self.campaign = self.starter.campaign(self.req.campaign)

    async def control(self, now: bool = False) -> None:
        """Pause, cancel and limits as the campaign holds them now (the last known ones when
        it does not answer: a busy worker)."""
        await self.canary()
        if not now and time.monotonic() - self.asked < CONTROL_EVERY_S:
            return
        self.asked = time.monotonic()
        activity.heartbeat()
        try:
            ctl = await self.client.get_workflow_handle(self.req.campaign_workflow_id).query("drive_control")
        except Exception:
            return
        self.paused, self.cancelled = bool(ctl.get("paused")), bool(ctl.get("cancelled"))
        lim = ctl.get("limits") or {}
        self.limits = (
            int(lim.get("max_concurrent", self.limits[0])),
            float(lim.get("cps", self.limits[1])),
            int(lim.get("max_attempts", self.limits[2])),
        )

    async def batch(self, redis: Redis, key: str, limit: int) -> None:
        """Claim, reserve the slots together (a batch after this one reserves the slots right
        after them), come back ``lead_s`` before the first, check each for its slot's time
        and start its call, whose dial waits for the slot (``Dial.not_before``)."""
        req = self.req
        claim = await self.acts._claim(req.campaign_id, key, limit, req.windows, self.limits[2])
        self.next_due = claim.next_due
        self.out_of_window += claim.out_of_window
        if not claim.claimed:
            return
        start = time.monotonic()
        slots = [await reserve_slot_at(redis, req.trunk, self.limits[1]) for _ in claim.claimed]
        until = start + slots[0][1] - req.lead_s
        while (left := until - time.monotonic()) > 0:
            await asyncio.sleep(min(left, CONTROL_EVERY_S))
            await self.control()
        await self.control()
        # Checked and started beside the loop, which claims the next batch at once: done in
        # line, a loaded machine's database writes and starts would outlast the batch's
        # second of slots, and the next batch's slots would come late (a gap in the pace).
        self.starting += len(claim.claimed)
        self.launches.append(asyncio.ensure_future(self.launch(claim.claimed, [t for t, _ in slots])))

    async def launch(self, claimed: list[store.Claimed], slots: list[float]) -> None:
        req = self.req
        go: list[store.Claimed] = []
        try:
            for c, slot in zip(claimed, slots, strict=True):
                if not self.dialing():  # paused or cancelled meanwhile: given back, not dialed
                    await DB_WORK.run(
                        store.release, self.acts.database_url, req.campaign_id, c.idx, c.attempt, time.time()
                    )
                elif (checked := await self.check(c, slot)) is not None:
                    go.append(checked)
            await asyncio.gather(*(self.start(c) for c in go))  # together: a start is a round trip
        finally:
            self.starting -= len(claimed)
            self.woken.set()

    def reap(self) -> None:
        """A launch that failed fails the drive (it is retried: ``store.open_attempts``)."""
        for t in [t for t in self.launches if t.done()]:
            self.launches.remove(t)
            t.result()

    async def check(self, c: store.Claimed, slot: float) -> store.Claimed | None:
        """The last checks, for the slot's time: the attempt with its slot, or None (not dialed)."""
        verdict = await self.acts._predial(self.req, c, slot)
        if verdict == "go":
            return c.model_copy(update={"slot": slot})
        self.skipped[verdict] += 1
        return None

    async def check_and_start(self, c: store.Claimed, slot: float) -> None:
        if (checked := await self.check(c, slot)) is not None:
            await self.start(checked)

    async def start(self, c: store.Claimed) -> None:
        s = Started(idx=c.idx, attempt=c.attempt, call_id=c.call_id)
        got = await self.starter.start(self.client, self.campaign, c, self.task_queue)
        if got.startswith("invalid"):
            why = got.removeprefix("invalid: ")[:200]
            outcome = store.Outcome(end_reason="invalid_contact", disposition=why)
            ended = Ended(idx=c.idx, attempt=c.attempt, outcome=outcome)
            await self.record([ended])
            return
        if got == "started":
            self.dialed.append(c.slot or time.time())
        self.follow(s)

    def follow(self, s: Started) -> None:
        if s.call_id in self.live:
            return
        self.live[s.call_id] = s
        self.watch[asyncio.ensure_future(self.acts._outcome(call_workflow_id(s.call_id)))] = s
        self.followed.set()

    async def recorder(self) -> None:
        """The calls' endings, recorded as they come, beside the dialing loop: the database
        writes of the calls that end in a second of the pace do not hold up its dials."""
        while True:
            if not self.watch:
                self.followed.clear()
                await self.followed.wait()
                continue
            await self.harvest(CONTROL_EVERY_S)

    async def harvest(self, timeout: float) -> None:
        """The calls that end within ``timeout``, recorded; each leaves ``live`` once its
        outcome is written (cut short, it stays live and the next drive records it)."""
        done, _ = await asyncio.wait(self.watch, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        picked = [(f, self.watch[f]) for f in done]
        ended = [Ended(idx=s.idx, attempt=s.attempt, outcome=f.result()) for f, s in picked]
        if ended:
            await self.record(ended)
        for f, s in picked:
            self.watch.pop(f, None)
            self.live.pop(s.call_id, None)
        if picked:
            self.woken.set()

    async def record(self, ended: list[Ended]) -> None:
        states, retry_at = await DB_WORK.run(self.acts._record_ended, self.req, ended, [])
        self.states.update(states)
        self.due(retry_at)
        now = time.time()
        for e in ended:
            self.outcomes[e.outcome.end_reason] += 1
            self.watch_dials(now, e.outcome.end_reason == "dial_failed")

    def watch_dials(self, now: float, failed: bool) -> None:
        self.dial_results = [r for r in self.dial_results if r[0] > now - BREAKER_WINDOW_S]
        self.dial_results.append((now, failed))
        failures = sum(1 for _, f in self.dial_results if f)
        if self.breaker is not None or failures < BREAKER_FAILURES:
            return
        if failures < BREAKER_SHARE * len(self.dial_results):
            return
        self.breaker = (
            f"circuit breaker: {failures} of the last {len(self.dial_results)} attempts failed to "
            f"dial within {BREAKER_WINDOW_S:.0f} s (LiveKit or the trunk refusing calls); fix it, "
            f"then `ringflow campaign resume {self.req.campaign_id}`"
        )
        self.dial_results = []
