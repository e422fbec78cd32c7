"""Telephony bench: placing a call, and how fast a killed agent is noticed and replaced.

Prints one JSON document (``_report.emit``). A private dev server (``bench/_stack.py``), the
simulator's in-process worker and scripted LLM (``ringflow/simulation/simulator.py``), and the LiveKit
fake (``ringflow/simulation/livekit_fake.py``) standing in for the LiveKit server, reached through the
real livekit-api SDK; its webhooks go to the real receiver (``agents/webhooks.py``).

Metrics (milliseconds):

* ``dial``: ``start_call(dial=...)`` until the fake receives ``CreateSIPParticipant`` (the
  workflow's create room + dispatch + dial activities). Baseline: one raw
  ``CreateSIPParticipant`` through the SDK on the same fake.
* ``agent_loss_detected``: the agent, a process of its own (``bench/_agent_proc.py``), is
  SIGKILLed at a random point of a caller's turn; its participant leaves the fake's room
  (``SIGNAL_CLOSE``, as LiveKit reports a dropped connection) until the fake receives the
  workflow's replacement ``CreateDispatch``: webhook, signal, ``agent_lost``, the
  ``dispatch_agent`` activity. The agent timeout is an hour, so heartbeats play no part.
  Baseline: one raw ``CreateDispatch`` on the fake.
* ``resume_gap``: the same kill until the replacement agent's first words to the caller (it
  attaches on the dispatch, as LiveKit starts a job in a prewarmed process, and answers the
  turn the dead agent left unanswered; when the caller's words died with the agent, the
  caller says them again). Baseline: the live agent's answer to a caller turn. Not measured
  here: LiveKit's own detection of the closed connection and job start, and speech.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import tempfile
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

from ringflow.activities.persistence import dispose_engines
from ringflow.agents.livekit_api import LiveKitDispatcher
from ringflow.agents.livekit_sip import LiveKitTelephony
from ringflow.agents.runner import AgentRun, attach_agent
from ringflow.agents.webhooks import WEBHOOK_PATH, WebhookRelay, bound_port, serve
from ringflow.callflow.loader import load_flow
from ringflow.contract.dial import Dial
from ringflow.simulation.livekit_fake import FakeLiveKit
from ringflow.simulation.simulator import environment
from ringflow.workflows.client import CallHandle, start_call

FLOW = Path("examples/flows/outbound_reminder/flow.yaml")
KILL_FLOW = Path("bench/flows/bench.yaml")  # an hour long: the kill rounds start agent processes
DIALS, KILLS, WARMUP = 30, 15, 3
AGENT = proto_models.ParticipantInfo.AGENT


def metric(name: str, samples: list[float], baseline: list[float]) -> dict[str, Any]:
    p50, base = percentile(samples, 50), percentile(baseline, 50)
    return {
        "name": name,
        "unit": "ms",
        "p50": round(p50, 1),
        "p99": round(percentile(samples, 99), 1),
        "baseline_p50": round(base, 2),
        "ratio": round(p50 / base, 1) if base > 0 else None,
        "n": len(samples),
    }


def session_for(base_url: str, call_id: str) -> AgentSession:
    model = lk_openai.LLM(
        model="scripted", base_url=base_url, api_key="scripted", extra_headers={"X-Ringflow-Script": call_id}
    )
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
        call = await start_call(
            client, definition, task_queue=tq, variables={"first_name": "Dana"}, dial=Dial(to="+15550100")
        )
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
            await api.sip.create_sip_participant(
                CreateSIPParticipantRequest(
                    sip_trunk_id="ST_bench",
                    sip_call_to="+15550100",
                    room_name=f"raw-{i}",
                    participant_identity=f"raw-{i}",
                    wait_until_answered=True,
                )
            )
            if i >= WARMUP:
                base.append((time.perf_counter() - t0) * 1000)
    return metric("dial", ours, base)


async def agent_process(address: str, call_id: str, base_url: str) -> tuple[asyncio.subprocess.Process, str]:
    """An agent in its own process (``bench/_agent_proc.py``), attached and ready."""
    agent_id = f"agent-{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryFile() as log:  # its stderr: read only if it fails to start
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(ROOT / "bench" / "_agent_proc.py"),
            address,
            call_id,
            agent_id,
            base_url,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 120)
        if line.strip() != b"ready":
            log.seek(0)
            raise RuntimeError(f"the agent process did not start: {log.read()[-2000:]!r}")
    return proc, agent_id


async def kills(
    client: Client, address: str, tq: str, lk: FakeLiveKit, base_url: str
) -> list[dict[str, Any]]:
    """The agent runs in a process of its own, which is SIGKILLed at a random point of a
    caller's turn (before, while or after its reply is generated and signalled)."""
    call_id = f"bench-tel-{uuid.uuid4().hex[:8]}"
    await start_call(
        client,
        load_flow(KILL_FLOW),
        task_queue=tq,
        call_id=call_id,
        room=call_id,
        agent_timeout_s=3600,
        max_history_events=50_000,
    )
    lk.add_participant(call_id, "sip-callee", proto_models.ParticipantInfo.SIP)
    rng = random.Random(11)
    detected: list[float] = []
    gap: list[float] = []
    reply: list[float] = []
    for i in range(KILLS):
        proc, agent_id = await agent_process(address, call_id, base_url)
        lk.add_participant(call_id, agent_id, AGENT)
        while not lk.dispatched.empty():
            lk.dispatched.get_nowait()
        assert proc.stdin is not None and proc.stdout is not None
        t0 = time.perf_counter()  # the baseline: a live agent's answer to a caller turn
        proc.stdin.write(f"question {i}\n".encode())
        await proc.stdin.drain()
        await asyncio.wait_for(proc.stdout.readline(), 30)
        base_ms = (time.perf_counter() - t0) * 1000
        proc.stdin.write(f"and another thing {i}\n".encode())
        await proc.stdin.drain()
        await asyncio.sleep(rng.uniform(0.0, 2 * base_ms / 1000))  # a random point of that turn
        t0 = time.perf_counter()
        proc.kill()
        await proc.wait()
        lk.remove_participant(call_id, agent_id, proto_models.SIGNAL_CLOSE)  # LiveKit sees it drop
        try:
            while True:  # LiveKit starts a job for the workflow's dispatch: a new agent attaches
                d = await asyncio.wait_for(lk.dispatched.get(), 30)
                if d.metadata_json().get("resume"):
                    break
        except TimeoutError:
            st = await CallHandle(client, call_id).state()
            raise RuntimeError(
                f"no dispatch after kill {i}: {st.status} {st.agent_id} {agent_id} {st.rejected[-3:]}"
            ) from None
        t_dispatch = time.perf_counter()
        run = await attach_agent(
            client,
            call_id,
            f"agent-{uuid.uuid4().hex[:6]}",
            idle_from_session=False,
            heartbeat_s=0,
            own_max_duration=False,
            session_factory=lambda _snap: session_for(base_url, call_id),
        )
        words = asyncio.ensure_future(first_words(run))
        if not (run.snapshot.transcript_tail and run.snapshot.transcript_tail[-1].role == "user"):
            # killed before the caller's words reached the call (or after they were answered):
            # the caller, hearing nothing new, says it again
            run.controller.begin_turn(f"again{i}")
            run.session.generate_reply(user_input=f"and another thing {i}")
        t_words = await words
        await run.session.wait_for_idle()
        await run.kill()  # quietly: the next round's agent is a process again
        detected.append((t_dispatch - t0) * 1000)
        gap.append((t_words - t0) * 1000)
        reply.append(base_ms)
    async with LiveKitAPI(lk.url, lk.api_key, lk.api_secret, failover=False) as api:
        raw: list[float] = []
        for i in range(WARMUP + KILLS):
            t0 = time.perf_counter()
            await api.agent_dispatch.create_dispatch(
                CreateAgentDispatchRequest(agent_name="raw", room=call_id, metadata="{}")
            )
            if i >= WARMUP:
                raw.append((time.perf_counter() - t0) * 1000)
    await CallHandle(client, call_id).hangup("user_hangup")
    await CallHandle(client, call_id).handle.result()
    return [metric("agent_loss_detected", detected, raw), metric("resume_gap", gap, reply)]


async def run() -> list[dict[str, Any]]:
    async with bench_stack() as bs, FakeLiveKit() as lk:
        phone = LiveKitTelephony(lk.url, lk.api_key, lk.api_secret, trunk_id="ST_bench")
        dispatcher = LiveKitDispatcher(lk.url, lk.api_key, lk.api_secret)
        async with environment(bs.stack.address, dispatcher=dispatcher, telephony=phone) as (
            client,
            tq,
            llm,
            _,
        ):
            metrics = await measure(client, tq, llm.base_url, bs.stack.address, lk)
    dispose_engines()
    return metrics


async def measure(
    client: Client, tq: str, llm_url: str, address: str, lk: FakeLiveKit
) -> list[dict[str, Any]]:
    relay = await serve(WebhookRelay(client, lk.api_key, lk.api_secret), "127.0.0.1", 0)
    lk.webhook_url = f"http://127.0.0.1:{bound_port(relay)}{WEBHOOK_PATH}"
    try:
        metrics = [await dials(client, tq, lk)]
        metrics += await kills(client, address, tq, lk, llm_url)
    finally:
        await relay.cleanup()
    return metrics


def main() -> None:
    os.chdir(ROOT)
    emit("telephony", asyncio.run(run()))


if __name__ == "__main__":
    main()
