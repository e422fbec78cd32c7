"""Telephony bench: placing a call, and how fast a killed agent is noticed and replaced.

Prints one JSON document (``_report.emit``). A private dev server (``bench/_stack.py``), the
simulator's in-process worker and scripted LLM (``ringflow/simulate.py``), and the LiveKit
fake (``ringflow/livekit_fake.py``) standing in for the LiveKit server, reached through the
real livekit-api SDK; its webhooks go to the real receiver (``agents/webhooks.py``).

Metrics (milliseconds):

* ``dial``: ``start_call(dial=...)`` until the fake receives ``CreateSIPParticipant`` (the
  workflow's create room + dispatch + dial activities). Baseline: one raw
  ``CreateSIPParticipant`` through the SDK on the same fake.
* ``agent_loss_detected``: the agent killed (its session dropped as a crash would, and the
  fake's participant leaving with ``SIGNAL_CLOSE``, which LiveKit reports at once for a
  dead process) until the fake receives the workflow's replacement ``CreateDispatch``:
  webhook, signal, ``agent_lost``, the ``dispatch_agent`` activity. The agent timeout is an
  hour, so heartbeats play no part. Baseline: one raw ``CreateDispatch`` on the fake.
* ``resume_gap``: the same kill until the replacement agent's first words to the caller
  (it attaches on the dispatch, as LiveKit would start the job, and answers the turn the
  dead agent left unanswered). Baseline: a live agent's reply to a caller turn, timed the
  same way (the first assistant item). Not measured here: LiveKit noticing a dead process's
  closed connection and starting the job (a prewarmed process), and speech synthesis.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path
from typing import Any

from _report import emit, percentile
from _stack import ROOT, bench_stack
from livekit.agents import AgentSession, ConversationItemAddedEvent
from livekit.api import CreateAgentDispatchRequest, CreateSIPParticipantRequest, LiveKitAPI
from livekit.plugins import openai as lk_openai
from livekit.protocol import models as proto_models
from temporalio.client import Client

from activities import dispatch as dispatch_mod
from activities import telephony
from activities.persistence import dispose_engines
from activities.telephony import Dial
from agents.livekit_api import LiveKitDispatcher
from agents.livekit_sip import LiveKitTelephony
from agents.runner import AgentRun, attach_agent
from agents.webhooks import WEBHOOK_PATH, WebhookRelay, bound_port, serve
from callflow.loader import load_flow
from ringflow.livekit_fake import FakeLiveKit
from ringflow.simulate import environment
from workflows.client import CallHandle, start_call

FLOW = Path("examples/flows/outbound_reminder/flow.yaml")
DIALS, KILLS, WARMUP = 30, 30, 3
NAME = "bench-lk"
AGENT = proto_models.ParticipantInfo.AGENT


def metric(name: str, samples: list[float], baseline: list[float]) -> dict[str, Any]:
    p50, base = percentile(samples, 50), percentile(baseline, 50)
    return {"name": name, "unit": "ms", "p50": round(p50, 1), "p99": round(percentile(samples, 99), 1),
            "baseline_p50": round(base, 2), "ratio": round(p50 / base, 1) if base > 0 else None,
            "n": len(samples)}


def session_for(base_url: str, call_id: str) -> AgentSession:
    model = lk_openai.LLM(model="scripted", base_url=base_url, api_key="scripted",
                          extra_headers={"X-Ringflow-Script": call_id})
    return AgentSession(llm=model, user_away_timeout=None)


async def first_words(run: AgentRun) -> float:
    """perf_counter() of the next assistant message in ``run``'s session."""
    said: asyncio.Future[float] = asyncio.get_running_loop().create_future()

    def on_item(ev: ConversationItemAddedEvent) -> None:
        if getattr(ev.item, "role", None) == "assistant" and not said.done():
            said.set_result(time.perf_counter())

    run.session.on("conversation_item_added", on_item)
    try:
        return await asyncio.wait_for(said, 30)
    finally:
        run.session.off("conversation_item_added", on_item)


async def dials(client: Client, tq: str, lk: FakeLiveKit) -> dict[str, Any]:
    definition = load_flow(FLOW)
    ours: list[float] = []
    for i in range(WARMUP + DIALS):
        before = len(lk.dial_times)
        t0 = time.perf_counter()
        call = await start_call(client, definition, task_queue=tq, variables={"first_name": "Dana"},
                                dial=Dial(to="+15550100"))
        while len(lk.dial_times) == before:
            await asyncio.sleep(0.0005)
        if i >= WARMUP:
            ours.append((lk.dial_times[before] - t0) * 1000)
        await call.hangup("user_hangup")
        await call.handle.result()
    base: list[float] = []
    async with LiveKitAPI(lk.url, lk.api_key, lk.api_secret, failover=False) as api:
        for i in range(WARMUP + DIALS):
            t0 = time.perf_counter()
            await api.sip.create_sip_participant(CreateSIPParticipantRequest(
                sip_trunk_id="ST_bench", sip_call_to="+15550100", room_name=f"raw-{i}",
                participant_identity=f"raw-{i}", wait_until_answered=True))
            if i >= WARMUP:
                base.append((time.perf_counter() - t0) * 1000)
    return metric("dial", ours, base)


async def kills(client: Client, tq: str, lk: FakeLiveKit, base_url: str) -> list[dict[str, Any]]:
    call_id = f"bench-tel-{uuid.uuid4().hex[:8]}"
    await start_call(client, load_flow(FLOW), task_queue=tq, call_id=call_id, room=call_id,
                            variables={"first_name": "Dana"}, agent_timeout_s=3600,
                            max_history_events=50_000)

    async def attach() -> AgentRun:
        agent_id = f"agent-{uuid.uuid4().hex[:6]}"
        run = await attach_agent(client, call_id, agent_id, idle_from_session=False, heartbeat_s=0,
                                 session_factory=lambda _snap: session_for(base_url, call_id),
                                 own_max_duration=False)
        lk.add_participant(call_id, agent_id, AGENT)
        return run

    run = await attach()
    await run.session.wait_for_idle()
    lk.add_participant(call_id, "sip-callee", proto_models.ParticipantInfo.SIP)
    detected: list[float] = []
    gap: list[float] = []
    reply: list[float] = []
    while not lk.dispatched.empty():
        lk.dispatched.get_nowait()
    for i in range(WARMUP + KILLS):
        ctrl = run.controller
        # a live reply first (the baseline), then the caller's next turn, left unanswered
        ctrl.begin_turn(f"b{i}")
        t0 = time.perf_counter()
        words = asyncio.ensure_future(first_words(run))
        run.session.generate_reply(user_input=f"question {i}")
        base_ms = (await words - t0) * 1000
        await run.session.wait_for_idle()
        ctrl.begin_turn(f"k{i}")
        ctrl.on_turn("user", f"and another thing {i}")
        assert await run.outbox.flush(10)
        t0 = time.perf_counter()
        await run.kill()
        lk.remove_participant(call_id, ctrl.agent_id, proto_models.SIGNAL_CLOSE)
        while True:  # LiveKit starts a job for the workflow's dispatch: a new agent attaches
            d = await asyncio.wait_for(lk.dispatched.get(), 30)
            if d.metadata_json().get("resume"):
                break
        t_dispatch = time.perf_counter()
        run = await attach()
        t_words = await first_words(run) if not run.controller.ended else time.perf_counter()
        await run.session.wait_for_idle()
        if i >= WARMUP:
            detected.append((t_dispatch - t0) * 1000)
            gap.append((t_words - t0) * 1000)
            reply.append(base_ms)
    async with LiveKitAPI(lk.url, lk.api_key, lk.api_secret, failover=False) as api:
        raw: list[float] = []
        for i in range(WARMUP + KILLS):
            t0 = time.perf_counter()
            await api.agent_dispatch.create_dispatch(CreateAgentDispatchRequest(
                agent_name="raw", room=call_id, metadata="{}"))
            if i >= WARMUP:
                raw.append((time.perf_counter() - t0) * 1000)
    await run.controller.on_caller_hangup()
    await CallHandle(client, call_id).handle.result()
    await run.close()
    return [metric("agent_loss_detected", detected, raw), metric("resume_gap", gap, reply)]


async def run() -> list[dict[str, Any]]:
    async with bench_stack() as bs, environment(bs.stack.address) as (client, tq, llm, _), \
            FakeLiveKit() as lk:
        relay = await serve(WebhookRelay(client, lk.api_key, lk.api_secret), "127.0.0.1", 0)
        lk.webhook_url = f"http://127.0.0.1:{bound_port(relay)}{WEBHOOK_PATH}"
        os.environ["RINGFLOW_DISPATCHER"] = NAME  # environment() puts the previous value back
        telephony.register_telephony(NAME, LiveKitTelephony(lk.url, lk.api_key, lk.api_secret,
                                                             trunk_id="ST_bench"))
        dispatch_mod.register_dispatcher(NAME, LiveKitDispatcher(lk.url, lk.api_key, lk.api_secret))
        try:
            metrics = [await dials(client, tq, lk)]
            metrics += await kills(client, tq, lk, llm.base_url)
        finally:
            await relay.cleanup()
    dispose_engines()
    return metrics


def main() -> None:
    os.chdir(ROOT)
    emit("telephony", asyncio.run(run()))


if __name__ == "__main__":
    main()
