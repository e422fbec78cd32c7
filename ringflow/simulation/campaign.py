"""``ringflow campaign simulate`` and ``bench/campaign.py``: a campaign through the real
workflows (CampaignWorkflow, a child CallWorkflow per attempt, the dial activities and the
LiveKit telephony code), with the LiveKit fake (``ringflow/simulation/livekit_fake.py``) answering each
number as a seeded draw says, and a scripted callee: each answered call gets the flow's
greeting and a short reply, then ends as a human hang-up, or as voicemail.

Only the realtime agent is replaced (by its messages to the workflow: attach, turns,
hangup); pacing is the real Redis limiter, contacts and attempts the real database.
``time_scale`` divides retry delays, so a "2h" retry takes seconds without another code path.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.api.history.v1 import History
from temporalio.client import Client

from ringflow.activities import campaign_store as store
from ringflow.activities.campaign_rules import RuleError, in_window
from ringflow.agents.livekit_sip import LiveKitTelephony
from ringflow.callflow.model import FlowDefinition
from ringflow.campaigns import start_campaign
from ringflow.codec import ephemeral_codec
from ringflow.contract.events import Turn, TurnsEvent
from ringflow.devstack import DevStack, free_port
from ringflow.settings import Settings, get_settings
from ringflow.simulation.livekit_fake import FakeLiveKit
from ringflow.simulation.scripted_llm import ScriptedLLM
from ringflow.temporal_setup import connect, register_search_attributes
from ringflow.workflows.campaign_messages import CampaignInput
from ringflow.workflows.client import CallHandle
from ringflow.workflows.worker import build_worker

KINDS = ("human", "no_answer", "busy", "voicemail", "failed")
SIM_TRUNK = "ST_campaign_sim"


def parse_answers(spec: str) -> dict[str, float]:
    """``human=0.4,no_answer=0.3,busy=0.1,voicemail=0.2``: weights of how a dialed number answers."""
    out: dict[str, float] = {}
    for part in spec.split(","):
        k, eq, v = part.strip().partition("=")
        if not eq or k not in KINDS:
            raise RuleError(f"--answers '{part}': expected KIND=WEIGHT with KIND one of {', '.join(KINDS)}")
        try:
            out[k] = float(v)
        except ValueError:
            raise RuleError(f"--answers '{part}': the weight is not a number") from None
        if out[k] < 0:
            raise RuleError(f"--answers '{part}': a weight cannot be negative")
    if sum(out.values()) <= 0:
        raise RuleError("--answers: the weights add up to nothing")
    return out


def draw(phones: list[str], answers: dict[str, float], seed: int) -> dict[str, str]:
    rng = random.Random(seed)
    kinds, weights = list(answers), list(answers.values())
    return {p: rng.choices(kinds, weights)[0] for p in phones}


class Callee:
    """The people called and the agent's side of each answered call, as messages to the workflow."""

    def __init__(self, client: Client, lk: FakeLiveKit, kinds: dict[str, str], greeting: str) -> None:
        self.client, self.lk, self.kinds, self.greeting = client, lk, kinds, greeting
        self.seen = 0
        self.tasks: set[asyncio.Task[None]] = set()
        self.live = 0
        self.max_live = 0

    async def run(self) -> None:
        while True:
            dials = self.lk.dials
            for d in dials[self.seen :]:
                task = asyncio.create_task(self.play(d.room_name, d.sip_call_to))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
            self.seen = len(dials)
            await asyncio.sleep(0.05)

    async def play(self, call_id: str, phone: str) -> None:
        call = CallHandle(self.client, call_id)
        deadline = time.monotonic() + 120
        pause = 0.1  # each look is a query the worker answers: with many calls ringing, back off
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                st = await call.state()
                if st.end_reason:
                    return
                if st.status == "live":
                    break
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.8)
        else:
            return
        self.live += 1
        self.max_live = max(self.max_live, self.live)
        try:
            await call.attach(f"sim-agent-{call_id}")
            machine = self.kinds.get(phone) == "voicemail"
            reply = "Beep. Please leave a message." if machine else "Yes, speaking."
            said = [Turn(role="assistant", text=self.greeting), Turn(role="user", text=reply)]
            await call.turns(
                TurnsEvent(event_id=f"t-{uuid.uuid4().hex[:8]}", seq=1, items=said, at=time.time())
            )
            await call.hangup("voicemail" if machine else "user_hangup")
        finally:
            self.live -= 1


@asynccontextmanager
async def sim_line(kinds: dict[str, str]) -> AsyncIterator[FakeLiveKit]:
    """The LiveKit fake, answering each number as ``kinds`` says: the worker's telephony."""
    async with FakeLiveKit() as lk:
        for phone, kind in kinds.items():
            lk.set_answer(phone, "human" if kind == "voicemail" else kind)
        yield lk


@asynccontextmanager
async def scripted_llm() -> AsyncIterator[str]:
    """The scripted endpoint's URL: the extraction at each call's end talks to it, not a real LLM."""
    llm = ScriptedLLM()
    try:
        yield await llm.start()
    finally:
        await llm.stop()


@asynccontextmanager
async def sim_temporal(address: str | None) -> AsyncIterator[Client]:
    """The Temporal at ``address``, or an embedded dev server for the simulation's length."""
    if address is not None:
        yield await connect(address)
        return
    with tempfile.TemporaryDirectory(prefix="ringflow-campaign-sim-") as tmp:
        stack = DevStack(port=free_port(), ui_port=free_port(), data_dir=Path(tmp))
        await stack.start()
        try:
            client = await connect(stack.address, codec=ephemeral_codec(get_settings()))
            await register_search_attributes(client, stack.namespace)
            yield client
        finally:
            stack.stop()


def greeting_of(definition: FlowDefinition) -> str:
    node = definition.flow.nodes.get(definition.flow.start_node)
    return (getattr(node, "greeting", None) or "Hello!")[:500]


async def simulate_campaign(
    inp: CampaignInput,
    contacts: list[store.Contact],
    answers: dict[str, float],
    *,
    seed: int,
    redis_url: str,
    address: str | None = None,
    database_url: str | None = None,
    on_progress: Callable[[dict[str, int]], None] | None = None,
) -> dict[str, Any]:
    """Run the campaign to its end; what happened, measured from the attempt rows and the fake.
    ``on_progress`` is given the contacts by state while it runs (``campaign simulate``'s
    progress line), each time they change."""
    kinds = draw([c.phone for c in contacts], answers, seed)
    with tempfile.TemporaryDirectory(prefix="ringflow-campaign-db-") as db_dir:
        db = database_url or f"sqlite:///{db_dir}/campaign.db"
        async with sim_temporal(address) as client, sim_line(kinds) as lk, scripted_llm() as llm_url:
            task_queue = f"campaign-sim-{uuid.uuid4().hex[:8]}"
            settings = Settings(
                database_url=db,
                redis_url=redis_url,
                http_allow_private=True,
                openai_base_url=llm_url,
                openai_api_key="scripted",
            )
            phone = LiveKitTelephony(
                lk.url, lk.api_key, lk.api_secret, trunk_id=SIM_TRUNK, ringing_timeout_s=20
            )
            callee = Callee(client, lk, kinds, greeting_of(inp.definition))
            runner = asyncio.create_task(callee.run())
            started = time.monotonic()
            try:
                async with build_worker(client, settings, task_queue=task_queue, telephony=phone):
                    handle = await start_campaign(
                        client, inp, contacts, database_url=db, task_queue=task_queue
                    )
                    watch = None
                    if on_progress is not None:
                        watch = asyncio.create_task(_watch(db, inp.campaign_id, on_progress))
                    try:
                        result = await handle.result()
                    finally:
                        if watch is not None:
                            watch.cancel()
                            with contextlib.suppress(asyncio.CancelledError):
                                await watch
                    if on_progress is not None:  # the last word: every contact in its final state
                        on_progress((await asyncio.to_thread(store.counts, db, inp.campaign_id))["contacts"])
                    events, run_starts, size = await _history_events(client, handle.id)
            finally:
                runner.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await runner
            wall = time.monotonic() - started
            return {
                **summarize(db, inp, result, lk, wall, events, kinds),
                "runs": len(run_starts),
                "run_starts": run_starts,  # when each run of the campaign began (epoch s)
                "history_bytes": size,  # every run's history, as the server stores it
                "history_events": events,  # every run's
            }


async def _watch(db: str, campaign_id: str, report: Callable[[dict[str, int]], None]) -> None:
    """The contacts by state, read from the campaign's rows every half second, reported when
    they change: a display's pace, not a synchronisation (the result is awaited apart)."""
    last: dict[str, int] | None = None
    while True:
        with contextlib.suppress(Exception):  # a busy SQLite file: the next look reads it
            states = (await asyncio.to_thread(store.counts, db, campaign_id))["contacts"]
            if states != last:
                report(states)
                last = states
        await asyncio.sleep(0.5)


async def _history_events(client: Client, workflow_id: str) -> tuple[int, list[float], int]:
    """Events of every run of the campaign workflow (each continue-as-new starts a new
    history), when each run began (epoch seconds, in order), and the histories' bytes."""
    total = size = 0
    starts: list[float] = []
    async for wf in client.list_workflows(f"WorkflowId = '{workflow_id}'"):
        history = await client.get_workflow_handle(workflow_id, run_id=wf.run_id).fetch_history()
        total += len(history.events)
        size += History(events=history.events).ByteSize()
        starts.append(wf.start_time.timestamp())
    return total, sorted(starts), size


def summarize(
    db: str,
    inp: CampaignInput,
    result: dict[str, Any],
    lk: FakeLiveKit,
    wall: float,
    events: int,
    kinds: dict[str, str],
) -> dict[str, Any]:
    tries = store.attempts(db, inp.campaign_id)
    dialed = [t for t in tries if t["dialed_at"] is not None and t["status"] in ("dialed", "done")]
    rooms = Counter(d.room_name for d in lk.dials)
    tz = {r["idx"]: r["timezone"] for r in store.report(db, inp.campaign_id)}
    out_of_window = sum(
        1
        for t in dialed
        if not in_window(inp.windows, tz[t["idx"]], datetime.fromtimestamp(t["dialed_at"], UTC))
    )
    spans = sorted(
        [(t["dialed_at"], 1) for t in dialed] + [(t["ended_at"], -1) for t in dialed if t["ended_at"]]
    )
    live = peak = 0
    for _, step in spans:
        live += step
        peak = max(peak, live)
    n = len(tz)
    return {
        "campaign_id": inp.campaign_id,
        "status": result.get("status"),
        "contacts": n,
        "answers_drawn": dict(Counter(kinds.values())),
        "contact_states": result.get("contacts", {}),
        "attempt_outcomes": result.get("attempts", {}),
        "dials": len(lk.dials),
        "double_dials": sum(c - 1 for c in rooms.values() if c > 1),
        "out_of_window": out_of_window,
        "max_concurrent_seen": peak,
        "max_concurrent": inp.limits.max_concurrent,
        "concurrency_exceeded": int(peak > inp.limits.max_concurrent),
        "history_events": events,
        "history_events_per_1000_contacts": round(events * 1000 / max(n, 1), 1),
        "dial_times": sorted(t["dialed_at"] for t in dialed),  # each attempt's slot (the attempt row)
        # when each dial reached LiveKit (the fake's perf_counter, as epoch seconds)
        "sip_dial_times": sorted(t + time.time() - time.perf_counter() for t in lk.dial_times),
        "wall_s": round(wall, 2),
    }
