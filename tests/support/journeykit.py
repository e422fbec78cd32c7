"""Helpers for journey tests: the journey flow, and a stand-in agent that takes each
answered journey call through one transition (``later`` or ``done``) and hangs up, noting
where each call started and what it started with.

The calls are real CallWorkflows dialed through the real LiveKit telephony code against the
protocol-level fake; only the conversation is replaced by the transition the LLM would call.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field

from temporalio.client import Client

from ringflow.callflow.loader import load_flow
from ringflow.callflow.model import FlowDefinition
from ringflow.callflow.state import CallState
from ringflow.contract.journey import JourneyView
from ringflow.simulation.livekit_fake import FakeLiveKit
from ringflow.workflows.journey_client import JourneyHandle, start_journey
from tests.support.campaignkit import live_calls
from tests.support.wfkit import FIXTURES, Agent, wait_until


def phone(n: int) -> str:
    """The n-th test person's number (tests never share a journey id, even in parallel)."""
    return f"+1212555{n:04d}"


def journey_flow() -> FlowDefinition:
    return load_flow(FIXTURES / "journey.yaml")


async def follow_up_asked(j: JourneyHandle) -> JourneyView | None:
    """The journey once a call asked for a follow-up (not its first call, due at once)."""
    view = await j.state()
    return view if view.follow_up is not None and view.follow_up.asked_by else None


async def journey_with_follow_up(client: Client, task_queue: str, number: str) -> JourneyHandle:
    """A journey of :func:`journey_flow` for ``number`` whose first call (taken by
    :func:`journey_agent` through ``later``) scheduled a follow-up."""
    j = await start_journey(
        client, journey_flow(), number, task_queue=task_queue, variables={"patient": "Alex"}
    )
    await wait_until(lambda: follow_up_asked(j), what="the follow-up scheduled")
    return j


@dataclass
class Answered:
    """What the stand-in saw of each call it took, in order."""

    starts: list[CallState] = field(default_factory=list)
    # the function each next call is to call: ``later`` schedules a follow-up, ``done`` not
    script: list[str] = field(default_factory=list)


@asynccontextmanager
async def journey_agent(client: Client, lk: FakeLiveKit, script: list[str]) -> AsyncIterator[Answered]:
    seen = Answered(script=list(script))

    async def loop() -> None:
        async for _, call in live_calls(client, lk):
            try:
                state = await call.handle.query("call_state", result_type=CallState)
            except Exception:  # gone between the two looks: nothing to take through
                continue
            seen.starts.append(state)
            name = seen.script.pop(0) if seen.script else "done"
            await Agent(call).transition(state.node or "", name)
            await call.hangup("user_hangup")

    task = asyncio.create_task(loop())
    try:
        yield seen
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
