"""Helpers for campaign tests: the LiveKit fake as the telephony, and a stand-in agent that
ends each answered call (as a human conversation, or as voicemail) so campaigns run through.

The calls are real CallWorkflows dialed through the real LiveKit telephony code against the
protocol-level fake (``ringflow/livekit_fake.py``); only the agent's conversation is replaced by
a hangup with the reason the real agent would report.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any

import pytest
from livekit.protocol.sip import CreateSIPParticipantRequest
from temporalio.client import Client

from ringflow.activities import campaign_store as store
from ringflow.activities.campaign_rules import RetryRule, parse_windows
from ringflow.agents.livekit_sip import LiveKitTelephony
from ringflow.campaigns import start_campaign
from ringflow.simulation.livekit_fake import FakeLiveKit
from ringflow.workflows.campaign_messages import CampaignInput, Limits
from ringflow.workflows.client import CallHandle
from tests.support.wfkit import clinic, running_worker, use_services

REDIS = "redis://127.0.0.1:6379/0"


@asynccontextmanager
async def fake_line(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeLiveKit]:
    async with FakeLiveKit() as fake:
        phone = LiveKitTelephony(
            fake.url,
            fake.api_key,
            fake.api_secret,
            agent_name="ringflow-test",
            trunk_id="ST_default",
            from_number="+15550111",
        )
        use_services(monkeypatch, telephony=phone)
        yield fake


async def live_calls(
    client: Client, lk: FakeLiveKit, ready: Callable[[CreateSIPParticipantRequest], bool] = lambda _: True
) -> AsyncIterator[tuple[CreateSIPParticipantRequest, CallHandle]]:
    """Each call dialled into the fake once, as soon as its workflow says it is live and
    ``ready`` takes its dial (a call held back is looked at again); a call that ended first is
    passed over. It polls: the fake learns of a workflow's status from no one."""
    handled: set[str] = set()
    while True:
        for d in list(lk.dials):
            if d.room_name in handled:
                continue
            call = CallHandle(client, d.room_name)
            try:
                st = await call.state()
            except Exception:  # not started yet, or its first task not run: next poll
                continue
            if st.status == "live" and ready(d):
                handled.add(d.room_name)
                yield d, call
            elif st.end_reason:
                handled.add(d.room_name)
        await asyncio.sleep(0.05)  # the poll's period


@asynccontextmanager
async def stand_in_agent(
    client: Client,
    lk: FakeLiveKit,
    reasons: dict[str, str] | None = None,
    default: str = "user_hangup",
    hold: set[str] | None = None,
) -> AsyncIterator[list[str]]:
    """Ends every answered call with the reason of its number (``reasons``), else ``default``;
    a number in ``hold`` stays on the line until the test removes it."""
    ended: list[str] = []

    async def loop() -> None:
        async for d, call in live_calls(client, lk, lambda d: d.sip_call_to not in (hold or set())):
            await call.hangup((reasons or {}).get(d.sip_call_to, default))
            ended.append(d.room_name)

    task = asyncio.create_task(loop())
    try:
        yield ended
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task


@asynccontextmanager
async def campaign_line(
    monkeypatch: pytest.MonkeyPatch,
    client: Client,
    task_queue: str,
    database_url: str,
    reasons: dict[str, str] | None = None,
    hold: set[str] | None = None,
) -> AsyncIterator[FakeLiveKit]:
    """What most campaign tests run in: the fake line, a worker pacing on the real Redis, and
    the stand-in agent (see :func:`stand_in_agent`)."""
    async with (
        fake_line(monkeypatch) as lk,
        running_worker(client, task_queue, database_url, redis_url=REDIS),
        stand_in_agent(client, lk, reasons, hold=hold),
    ):
        yield lk


def contacts(*phones: str, tz: str = "UTC") -> list[store.Contact]:
    return [store.Contact(phone=p, tz=tz, variables={"patient": f"P{i}"}) for i, p in enumerate(phones)]


def campaign_input(
    cid: str, trunk: str, *, window: str = "always", retry: dict[str, RetryRule] | None = None, **limits: Any
) -> CampaignInput:
    return CampaignInput(
        campaign_id=cid,
        definition=clinic(),
        trunk_id=trunk,
        limits=Limits(**limits),
        windows=parse_windows([window]),
        retry=retry or {},
        time_scale=1.0,
        ringing_timeout_s=5,
    )


async def run_campaign(
    client: Client,
    task_queue: str,
    database_url: str,
    inp: CampaignInput,
    people: list[store.Contact],
    dnc: list[str] | None = None,
) -> Any:
    return await start_campaign(
        client, inp, people, database_url=database_url, task_queue=task_queue, dnc=dnc
    )


def new_id(prefix: str = "c") -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


async def live_on(client: Client, lk: FakeLiveKit, phone: str, status: str = "live") -> bool:
    """Whether the call dialed to ``phone`` has this status now (``live``, ``dialing``)."""
    for d in list(lk.dials):
        if d.sip_call_to == phone:
            return (await CallHandle(client, d.room_name).state()).status == status
    return False


async def progress(handle: Any) -> dict[str, Any]:
    return await handle.query("progress")
