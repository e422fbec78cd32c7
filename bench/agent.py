"""Agent bench: what durability costs the agent, next to the same work without it.

Prints one JSON document (``_report.emit``). Metrics:

* ``transition_hot_path`` (µs): the agent-side cost of a transition, i.e.
  ``FlowController.on_tool_call`` for a transition-only function on the 20-node flow of
  ``bench/engine.py``: tool call in, engine applied, the next node's prompt and tools set
  on a session port, the ``transition`` event queued in the outbox. The port is a no-op
  stand-in that records calls, and the outbox's sender task never runs inside a timed
  call (it drains between samples, as it would between two transitions of a real call).
  The baseline is the same transition with no durability at all: ``call_locally`` (the
  engine applied, the LLM's answer picked out of the effects, as any engine must) and the
  effects applied to the same port, with no outbox, event ids, sequence numbers or kill
  points (what an in-memory, Pipecat-Flows-style engine pays). The controller calls the
  same ``call_locally``, so the difference is durability alone. Target: ratio <= 1.1,
  p99 < 1000 µs.
* ``resume`` (ms): an agent killed mid-call until its replacement is attached and ready on
  the same node (``attach_agent`` returned: snapshot fetched through the ``attach``
  update, controller, ``FlowAgent`` and a text-mode ``AgentSession`` started, the node's
  prompt and tools applied), over 20 kills. LiveKit's dispatch time is excluded, and so
  is tearing the dead agent down (a crashed process does not do it). The session's LLM
  uses one HTTP client per process, as a prewarmed agent process would. Baseline: a raw
  Temporal update round trip (``echo`` on the bench's bare workflow), the least an
  attach can cost.
* ``resume_new_llm_client`` (ms): the same, with a session factory that builds its LLM
  client per session, as ``ringflow/servers/agent.py`` and the simulator do today; the
  difference from ``resume`` is the client's construction (an SSL context, ~50 ms).
* ``node_function`` (ms): a node function with a no-op handler (``bench/flows``'s
  ``noop``) through the agent: ``on_tool_call`` -> ``call_function`` update -> handler
  activity -> result and effects applied. Baseline: an update on the bare workflow that
  runs one no-op local activity, the same durable work without Ringflow.

Everything runs in this process against a private dev server (``bench/_stack.py``);
samples of each metric and its baseline are interleaved, so a slow patch of the machine
hits both. Run: ``.venv/bin/python bench/agent.py``; ``RINGFLOW_BENCH_SHORT=1`` takes 4,000
transitions (after 1,000 of warm-up), 10 kills and 30 node functions instead.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import openai
from _baseline import BenchBaseline, bench_noop
from _report import emit, percentile
from _stack import ROOT, bench_stack
from engine import T0, bench_flow
from livekit.agents import AgentSession
from livekit.plugins import openai as lk_openai
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from ringflow.activities.persistence import dispose_engines
from ringflow.agents.controller import FlowController, call_locally
from ringflow.agents.outbox import Outbox
from ringflow.agents.runner import AgentRun, attach_agent
from ringflow.callflow.effects import SetNode
from ringflow.callflow.engine import Engine
from ringflow.callflow.events import CallStarted
from ringflow.callflow.loader import load_flow, validate_data
from ringflow.callflow.state import CallState
from ringflow.contract.events import AgentEvent
from ringflow.contract.updates import Snapshot
from ringflow.simulation.scripted_llm import LANE_HEADER
from ringflow.simulation.simulator import environment
from ringflow.workflows.client import start_call

FLOW = Path("bench/flows/bench.yaml")  # relative to ROOT, where the worker imports handlers from
SHORT = os.environ.get("RINGFLOW_BENCH_SHORT") == "1"
HOT_N = 4_000 if SHORT else 20_000
HOT_WARMUP = 1_000 if SHORT else 2_000
RESUMES = 10 if SHORT else 20
RESUME_WARMUP = 3
FUNCTIONS = 30 if SHORT else 100
FUNCTION_WARMUP = 10


def metric(name: str, unit: str, samples: list[float], baseline: list[float]) -> dict[str, Any]:
    """``_report``'s shape, with ``ratio`` to 3 decimals: the 1.1 target would vanish in
    rounding to one."""
    p50, base = percentile(samples, 50), percentile(baseline, 50)
    return {
        "name": name,
        "unit": unit,
        "p50": round(p50, 3),
        "p99": round(percentile(samples, 99), 3),
        "baseline_p50": round(base, 3),
        "ratio": round(p50 / base, 3) if base else None,
        "n": len(samples),
    }


# --- transition hot path ------------------------------------------------------------------
class NoopPort:
    """A ``SessionPort`` that only records what it was told: the session's cost is not the
    controller's, and both sides of the comparison drive the same port."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.ending: asyncio.Task[None] | None = None

    async def set_node(self, eff: SetNode) -> None:
        self.calls.append(eff)

    def say(self, text: str, allow_interrupt: bool) -> None:
        self.calls.append(text)

    def reply(self, instructions: str | None, allow_interrupt: bool) -> None:
        self.calls.append(instructions)

    async def end_call(self, reason: str) -> None:
        self.calls.append(reason)


def run_now(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends (a no-op port awaits nothing) to completion
    without the event loop, so a sample times the code and not a loop iteration."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("the timed coroutine suspended: something on the hot path awaited I/O")


async def plain_transition(engine: Engine, state: CallState, applier: FlowController, name: str) -> CallState:
    """The baseline: the transition with no durability, as an in-memory engine does it: the
    engine applied and the LLM's answer picked out (``call_locally``, which the controller
    uses too), the effects applied to the port through the controller's own ``apply`` (on a
    controller used for nothing else). So both sides share all but the durable part."""
    step, out, _ = call_locally(engine, state, name, {}, time.time())
    assert not out.error
    await applier.apply(step.effects)
    return step.state


async def transition_hot_path() -> dict[str, Any]:
    report = validate_data(bench_flow())
    assert report.definition is not None, report.errors
    definition = report.definition
    engine = Engine(definition)
    start = engine.start(CallStarted(call_id="bench", variables={"first_name": "Dana"}, at=T0)).state
    snap = Snapshot(
        call_id="bench",
        node=start.node,
        prompt=None,
        tools=[],
        state=start,
        transcript_tail=[],
        ended=False,
        next_seq=1,
        definition=definition,
    )

    async def send(events: list[AgentEvent]) -> None:
        """Delivered at once; it only runs between samples (see ``drain``)."""

    outbox = Outbox(send)
    outbox.start()
    port = NoopPort()
    ctrl = FlowController(None, snap, outbox, "bench-agent")  # type: ignore[arg-type]  # no call needed
    ctrl.bind(port)
    applier = FlowController(None, snap, Outbox(send), "bench-baseline")  # type: ignore[arg-type]
    applier.bind(port)

    def ours() -> int:
        ctrl.state = start
        ctrl.begin_turn("t")
        port.calls.clear()
        t0 = time.perf_counter_ns()
        out = run_now(ctrl.on_tool_call("next_0", {}))
        dt = time.perf_counter_ns() - t0
        assert not out.error and ctrl.node == "step_1" and isinstance(port.calls[0], SetNode), out
        return dt

    def theirs() -> int:
        port.calls.clear()
        t0 = time.perf_counter_ns()
        state = run_now(plain_transition(engine, start, applier, "next_0"))
        dt = time.perf_counter_ns() - t0
        assert state.node == "step_1" and isinstance(port.calls[0], SetNode)
        return dt

    async def drain() -> None:
        """Let the sender deliver what the last sample queued, outside the timing."""
        if not await outbox.flush(timeout=5):
            raise RuntimeError("the outbox did not drain")

    a: list[int] = []
    b: list[int] = []
    gc.collect()
    for i in range(HOT_WARMUP + HOT_N):
        if i % 2:
            x, y = ours(), theirs()
        else:
            y, x = theirs(), ours()
        await drain()
        if i >= HOT_WARMUP:
            a.append(x)
            b.append(y)
    assert outbox.sent_events == HOT_WARMUP + HOT_N
    await outbox.close(1.0)
    return metric("transition_hot_path", "us", [v / 1000 for v in a], [v / 1000 for v in b])


# --- resume and node functions, against a dev server ------------------------------------
async def timed(fn: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = await fn()
    return (time.perf_counter() - t0) * 1000, out


def text_session(base_url: str, lane: str, client: openai.AsyncClient | None = None) -> AgentSession:
    """The text-mode session ``ringflow call simulate`` uses (no room, no STT/TTS); with
    ``client``, its LLM shares that HTTP client instead of building its own."""
    model = lk_openai.LLM(
        model="scripted",
        base_url=base_url,
        api_key="scripted",
        client=client,
        extra_headers={LANE_HEADER: lane},
    )
    return AgentSession(llm=model, user_away_timeout=None)


async def durable(client: Client, task_queue: str, base_url: str) -> list[dict[str, Any]]:
    call_id = f"bench-agent-{uuid.uuid4().hex[:8]}"
    handle = await start_call(
        client,
        load_flow(FLOW),
        task_queue=task_queue,
        call_id=call_id,
        agent_timeout_s=3600,
        max_history_events=50_000,
    )
    base: WorkflowHandle[Any, Any] = await client.start_workflow(
        BenchBaseline.run, id=f"base-{uuid.uuid4().hex[:10]}", task_queue=f"{task_queue}-base"
    )
    # One LLM HTTP client for the process, as a prewarmed agent process would hold: building
    # one (an SSL context, even for plain HTTP) costs ~50 ms, measured apart below.
    shared = openai.AsyncClient(api_key="scripted", base_url=base_url, max_retries=0)

    async def attach(own_client: bool = False) -> AgentRun:
        def factory(snap: Snapshot) -> AgentSession:
            return text_session(base_url, call_id, None if own_client else shared)

        return await attach_agent(
            client,
            call_id,
            f"bench-{uuid.uuid4().hex[:6]}",
            session_factory=factory,
            idle_from_session=False,
            heartbeat_s=0,
            own_max_duration=False,
        )

    async def echo() -> Any:
        return await base.execute_update(BenchBaseline.echo, {"name": "noop"})

    run = await attach()
    run.controller.on_turn("user", "Hello?")  # a transcript: the next agents resume, not start
    run.controller.on_turn("assistant", "Hello, this is the bench.")

    # resume: even kills get a session on the shared client, odd ones build their own.
    resume: tuple[list[float], list[float]] = ([], [])
    resume_base: tuple[list[float], list[float]] = ([], [])
    for i in range(RESUME_WARMUP + 2 * RESUMES):
        ctrl = run.controller
        ctrl.begin_turn(f"r{i}")
        assert not (await ctrl.on_tool_call("flip", {})).error  # the dead agent's last transition...
        assert await run.outbox.flush(10)  # ...reached the workflow, as a previous turn's would
        want = ctrl.node
        await run.kill()
        ms, run = await timed(lambda own=bool(i % 2): attach(own))
        assert run.resumed and run.controller.node == want, (run.controller.node, want)
        base_ms, _ = await timed(echo)
        if i >= RESUME_WARMUP:
            resume[i % 2].append(ms)
            resume_base[i % 2].append(base_ms)

    async def noop() -> None:
        run.controller.begin_turn(f"f{uuid.uuid4().hex[:8]}")
        out = await run.controller.on_tool_call("noop", {})
        if out.error:
            raise RuntimeError(f"noop failed: {out.result}")

    async def base_call() -> Any:
        return await base.execute_update(BenchBaseline.call, {"name": "noop"})

    fn: list[float] = []
    fn_base: list[float] = []
    for i in range(FUNCTION_WARMUP + FUNCTIONS):
        pair = (noop, base_call) if i % 2 else (base_call, noop)
        first, _ = await timed(pair[0])
        second, _ = await timed(pair[1])
        ours, theirs = (first, second) if i % 2 else (second, first)
        if i >= FUNCTION_WARMUP:
            fn.append(ours)
            fn_base.append(theirs)

    await run.controller.on_caller_hangup()
    await asyncio.wait_for(handle.handle.result(), 30)
    await run.close()
    await shared.close()
    await base.signal(BenchBaseline.stop)
    await base.result()
    return [
        metric("resume", "ms", resume[0], resume_base[0]),
        metric("resume_new_llm_client", "ms", resume[1], resume_base[1]),
        metric("node_function", "ms", fn, fn_base),
    ]


async def run() -> list[dict[str, Any]]:
    metrics = [await transition_hot_path()]
    async with bench_stack() as bs, environment(bs.stack.address) as (client, tq, llm, _):
        base = Worker(client, task_queue=f"{tq}-base", workflows=[BenchBaseline], activities=[bench_noop])
        async with base:
            metrics += await durable(client, tq, llm.base_url)
    dispose_engines()
    return metrics


def main() -> None:
    os.chdir(ROOT)  # the flow's source path, and so its handler module, is relative to the repo
    emit("agent", asyncio.run(run()))


if __name__ == "__main__":
    main()
