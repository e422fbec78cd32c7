"""Kill the agent anywhere, resume with a new one: the call must end exactly as if nothing happened.

This is the durability claim end to end. Every conversation script under
``examples/scripts`` (and the shared fixture scripts, when a checkout has them) is first
played uninterrupted as a real call (``ringflow.simulation.simulator.run_script``: a real
``CallWorkflow``, a worker of this process, the agent in livekit-agents text mode, the
LLM a scripted HTTP endpoint); that record is the baseline. Then the same script is
played again with the agent killed inside one turn at one kill point of
``agents/controller.py`` (a tool call arriving, a transition applied but its signal not
yet queued, a node function before its update is sent or after it ran but before its
effects were applied, a transcript turn, an idle re-prompt), a new agent attached and
the turn replayed. The path, state, variables, end reason and disposition must equal the
baseline's: nothing lost, nothing applied twice (a handler that ran twice would show in
the state: ticket and booking counters, identity attempts).

Which (script, turn, point) cases run is a seeded random choice (``random.Random(1234)``)
taken round-robin over the kill points, so every kind of kill is exercised and a failure
reproduces; cases whose point the turn never reaches do not count, and cases are drawn
until at least ``MIN_KILLS`` kills have happened.

One case kills a separate agent *process* with SIGKILL (``tests/support/kill_child.py``): the
child attaches to the call, plays up to a kill point and freezes there; this process
kills it, attaches a new agent and replays the turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from livekit.agents import AgentSession
from temporalio.client import Client

from ringflow.activities.persistence import dispose_engines
from ringflow.agents.runner import AgentRun, attach_agent
from ringflow.callflow.engine import Engine
from ringflow.callflow.loader import load_flow
from ringflow.callflow.model import FlowDefinition
from ringflow.contract.updates import Snapshot
from ringflow.devstack import DevStack
from ringflow.simulation.kill_points import Killed, kill_hooks
from ringflow.simulation.scripted_llm import ScriptedLLM
from ringflow.simulation.scripts import Script, is_flow_file, load_script, said_failures
from ringflow.simulation.simulator import (
    TURN_TIMEOUT_S,
    SimulationResult,
    _Killer,
    _play,
    environment,
    run_script,
)
from ringflow.workflows.client import start_call
from tests.support.kill_child import KILLPOINT, scripted_session
from tests.support.killcases import COMPARED, differences, fresh_handlers, outcome
from tests.support.paths import ROOT

EXAMPLES = ROOT / "examples" / "scripts"
# Optional: the shared fixtures checked out beside the repo (``../shared``), as the other
# tests that use them expect; without them the draw is over the examples alone.
SHARED = ROOT.parent / "shared" / "fixtures" / "scripts"
MIN_KILLS = 50
SEED = 1234
CASE_TIMEOUT_S = 90.0
POINTS = (
    "tool_call",
    "after_local_transition",
    "during_function",
    "after_function",
    "turn:user",
    "turn:assistant",
    "idle",
)
# The kinds the issue names explicitly; each must have been killed at least once.
REQUIRED_POINTS = {"tool_call", "after_local_transition", "during_function", "after_function"}
SIGKILL_SCRIPT = EXAMPLES / "appointment_reminder_reschedule.yaml"
SIGKILL_TURN = 4  # reschedule_appointment: a handler whose result routes the call
SIGKILL_POINT = "after_function"  # it ran in the workflow; the dead agent never saw the result

pytestmark = pytest.mark.timeout(300)


def script_paths() -> list[Path]:
    """The examples, plus the shared fixture scripts when present (flow files skipped)."""
    paths = sorted(EXAMPLES.glob("*.yaml"))
    if SHARED.is_dir():
        paths += sorted(p for p in SHARED.glob("*.yaml") if not is_flow_file(p))
    return paths


@dataclass(frozen=True)
class Case:
    script: Path
    turn: int
    point: str

    def __str__(self) -> str:
        return f"{self.script.name} turn {self.turn} at {self.point}"


def reachable_points(script: Script, definition: FlowDefinition) -> list[tuple[int, str]]:
    """(turn, point) pairs a turn can reach, judged from the script alone, so that few
    drawn cases are wasted on points a turn never gets to (those would not count anyway)."""
    flow = Engine(definition).flow
    kinds: dict[str, set[str]] = {}
    for node in flow.nodes.values():
        for name, fn in node.functions.items():
            kinds.setdefault(name, set()).add(fn.kind)
    idle_s = definition.flow.settings.idle.timeout_s
    out: list[tuple[int, str]] = []
    for i, turn in enumerate(script.turns):
        if turn.user is None:
            if (turn.silence or 0) >= idle_s:
                out.append((i, "idle"))
            continue
        points = {"turn:user", "turn:assistant"}
        for step in turn.llm or []:
            if "call" not in step:
                continue
            points.add("tool_call")
            for kind in kinds.get(step["call"], set()):
                points |= (
                    {"during_function", "after_function"}
                    if kind in ("handler", "http")
                    else {"after_local_transition"}
                )
        out += [(i, p) for p in POINTS if p in points]
    return out


def draw_cases(paths: list[Path], rng: random.Random) -> list[Case]:
    """All reachable cases, shuffled per kill point and dealt round-robin over the points."""
    by_point: dict[str, list[Case]] = {p: [] for p in POINTS}
    for path in paths:
        script, flow_path = load_script(path)
        for turn, point in reachable_points(script, load_flow(flow_path)):
            by_point[point].append(Case(path, turn, point))
    for cases in by_point.values():
        rng.shuffle(cases)
    out: list[Case] = []
    while any(by_point.values()):
        for point in POINTS:
            if by_point[point]:
                out.append(by_point[point].pop())
    return out


@dataclass
class Env:
    client: Client
    task_queue: str
    llm: ScriptedLLM
    address: str
    namespace: str
    baselines: dict[Path, dict[str, Any]] = field(default_factory=dict)

    async def play(self, script: Path, **kw: Any) -> SimulationResult:
        fresh_handlers(script)
        return await asyncio.wait_for(
            run_script(script, self.client, self.task_queue, self.llm, **kw), CASE_TIMEOUT_S
        )

    async def baseline(self, script: Path) -> dict[str, Any]:
        """The uninterrupted run, once per script."""
        if script not in self.baselines:
            result = await self.play(script)
            assert result.kills == 0
            self.baselines[script] = outcome(result)
        return self.baselines[script]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def env(temporal_server: DevStack) -> AsyncIterator[Env]:
    """The session's dev server, a worker and a scripted LLM for this module's calls."""
    if not temporal_server.running:
        await temporal_server.start()
    try:
        async with environment(temporal_server.address) as (client, task_queue, llm, _):
            yield Env(client, task_queue, llm, temporal_server.address, temporal_server.namespace)
    finally:
        dispose_engines()


@pytest.mark.skipif(
    not SHARED.is_dir(),
    reason="no ../shared/fixtures/scripts beside the repo: the kill test draws from the examples alone",
)
def test_shared_fixture_scripts_join_the_draw() -> None:
    paths = script_paths()
    shared = [p for p in paths if p.parent == SHARED]
    assert shared, f"no script from {SHARED} is drawn from"
    assert not any(is_flow_file(p) for p in shared), "a flow file was taken for a script"


async def test_kills_at_random_points_end_like_the_uninterrupted_call(env: Env) -> None:
    cases = draw_cases(script_paths(), random.Random(SEED))
    kills: list[Case] = []
    failures: list[str] = []
    played = 0
    for case in cases:
        if len(kills) >= MIN_KILLS:
            break
        played += 1
        want = await env.baseline(case.script)
        result = await env.play(case.script, kill_at=case.turn, kill_point=case.point)
        if not result.kills:
            continue  # the turn did not reach this point (e.g. the call had already ended)
        kills.append(case)
        failures += [f"{case}: {d}" for d in differences(outcome(result), want)]
    points = sorted({c.point for c in kills})
    scripts = len({c.script for c in kills})
    print(f"{len(kills)} kills in {played} runs over {scripts} scripts at {points}")
    assert not failures, "\n".join(failures)
    assert len(kills) >= MIN_KILLS, f"only {len(kills)} of {len(cases)} cases killed the agent"
    missed = REQUIRED_POINTS - {c.point for c in kills}
    assert not missed, f"never killed at {sorted(missed)}"


END_NODE_SCRIPT = EXAMPLES / "support_triage_billing_refund.yaml"


@pytest.mark.parametrize("point", ["after_function", "turn:assistant"])
async def test_kill_between_reaching_an_end_node_and_its_last_turn(env: Env, point: str) -> None:
    """The last turn's handler routes the call to an end node; the agent dies before the
    goodbye reaches the workflow. The workflow has ended the call and waits for the final
    turn, so the new agent must speak the end node's turn before hanging up: without it
    the caller was dropped in silence and the end node's extraction had nothing to read.
    Pinned here because the random draw above need not land on it."""
    script, _ = load_script(END_NODE_SCRIPT)
    last = len(script.turns) - 1
    want = await env.baseline(END_NODE_SCRIPT)
    result = await env.play(END_NODE_SCRIPT, kill_at=last, kill_point=point)
    assert result.kills == 1
    assert not differences(outcome(result), want), "\n".join(differences(outcome(result), want))
    spoken = [t for t in result.transcript if t["role"] == "assistant" and t["node"] == want["path"][-1]]
    assert spoken, "nothing was said on the end node"


# --- a separate agent process, SIGKILLed ------------------------------------------------
async def read_killpoint(proc: asyncio.subprocess.Process) -> str:
    """The child's ``KILLPOINT <name>`` line; anything else on stdout is skipped."""
    assert proc.stdout is not None
    while True:
        line = (await proc.stdout.readline()).decode()
        if not line:
            err = b"" if proc.stderr is None else await proc.stderr.read()
            raise AssertionError(f"the child exited before its kill point:\n{err.decode()[-4000:]}")
        if line.startswith(f"{KILLPOINT} "):
            return line.split(" ", 1)[1].strip()


async def drain(stream: asyncio.StreamReader | None, into: list[bytes]) -> None:
    """Keep reading the child's stderr, so its logging never blocks on a full pipe."""
    if stream is None:
        return
    while chunk := await stream.read(65536):
        into.append(chunk)


async def test_sigkilled_agent_process_is_replaced_and_the_call_ends_the_same(env: Env) -> None:
    want = await env.baseline(SIGKILL_SCRIPT)
    script, flow_path = load_script(SIGKILL_SCRIPT)
    assert all(t.llm for t in script.turns), "the child needs every turn's reply queued up front"
    definition = load_flow(flow_path)
    call_id = f"sigkill-{uuid.uuid4().hex[:10]}"
    lane = env.llm.lane(call_id)
    for node, values in script.extract.items():
        lane.set_extract(node, values)
    lane.replace_replies([t.llm for t in script.turns if t.llm is not None])
    fresh_handlers(SIGKILL_SCRIPT)
    handle = await start_call(
        env.client, definition, task_queue=env.task_queue, call_id=call_id, variables=script.variables
    )

    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.support.kill_child",
        "--address",
        env.address,
        "--namespace",
        env.namespace,
        "--call-id",
        call_id,
        "--lane",
        call_id,
        "--llm-url",
        env.llm.base_url,
        "--script",
        str(SIGKILL_SCRIPT),
        "--kill-turn",
        str(SIGKILL_TURN),
        "--kill-point",
        SIGKILL_POINT,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stderr: list[bytes] = []
    try:
        reached = await asyncio.wait_for(read_killpoint(proc), CASE_TIMEOUT_S)
        drainer = asyncio.get_running_loop().create_task(drain(proc.stderr, stderr))
        assert reached == SIGKILL_POINT
        proc.send_signal(signal.SIGKILL)
        assert await asyncio.wait_for(proc.wait(), 10) == -signal.SIGKILL
        await drainer
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()

    # A new agent in this process takes over and replays the turn the dead one was in.
    lane.replace_replies([t.llm for t in script.turns[SIGKILL_TURN:] if t.llm is not None])

    def session_factory(snap: Snapshot) -> AgentSession:
        return scripted_session(env.llm.base_url, call_id)

    # answer_pending=False, as in the simulator: the turn is replayed below, and answering the
    # dead agent's last caller turn as well would race that replay for the scripted replies.
    run = await attach_agent(
        env.client,
        call_id,
        f"sigkill-agent-{uuid.uuid4().hex[:6]}",
        session_factory=session_factory,
        answer_pending=False,
        idle_from_session=False,
        heartbeat_s=0,
        own_max_duration=False,
    )
    assert run.resumed
    record = await finish_call(run, script, definition, SIGKILL_TURN, handle.handle)
    got = {k: getattr(record, k) for k in COMPARED}
    assert not differences(got, want), "\n".join(differences(got, want))


async def finish_call(
    run: AgentRun, script: Script, definition: FlowDefinition, start: int, handle: Any
) -> Any:
    """Play turns ``start``.. on ``run`` and hang up, as ``run_script`` does after a kill."""
    idle_s = definition.flow.settings.idle.timeout_s
    try:
        for i in range(start, len(script.turns)):
            if run.controller.ended:
                break
            await asyncio.wait_for(_play(run, script.turns[i], f"t{i}", idle_s), TURN_TIMEOUT_S)
        if not run.controller.ended:
            await run.controller.on_caller_hangup()
        ending = run.controller.ending
        if ending is not None:
            await asyncio.wait_for(ending, TURN_TIMEOUT_S)
        return await asyncio.wait_for(handle.result(), TURN_TIMEOUT_S)
    finally:
        await run.close()


ACTION_SCRIPT = EXAMPLES / "order_status_lost.yaml"


async def test_agent_dying_with_its_transition_into_an_action_node_unsent(env: Env) -> None:
    """The LLM's function moves the call into an action node (``track``): the agent applies
    the transition, queues its signal and waits, flushing, for the workflow to run the action.
    It dies then, the transition still in its outbox (the sender held here until the kill, so
    the order is certain; in the random draw above it was a race with the speech's turn).
    The dead agent must ask the workflow nothing more: it used to go on to an ``attach``
    settling on a seq that never came, which held the call until the workflow gave it up as
    ``agent_lost`` instead of the new agent replaying the turn to the end node."""
    want = await env.baseline(ACTION_SCRIPT)
    script, flow_path = load_script(ACTION_SCRIPT)
    definition = load_flow(flow_path)
    call_id = f"held-{uuid.uuid4().hex[:10]}"
    lane = env.llm.lane(call_id)
    for node, values in script.extract.items():
        lane.set_extract(node, values)
    lane.replace_replies([t.llm for t in script.turns if t.llm is not None])
    fresh_handlers(ACTION_SCRIPT)
    handle = await start_call(
        env.client, definition, task_queue=env.task_queue, call_id=call_id, variables=script.variables
    )

    def session_factory(snap: Snapshot) -> AgentSession:
        return scripted_session(env.llm.base_url, call_id)

    killer = _Killer("turn:assistant")  # the transition's speech, said while the agent waits
    dead = asyncio.Event()

    def kill_hook(point: str) -> None:
        try:
            killer(point)
        except Killed:
            dead.set()
            raise

    run = await attach_agent(
        env.client,
        call_id,
        f"held-agent-{uuid.uuid4().hex[:6]}",
        session_factory=session_factory,
        hooks=kill_hooks(kill_hook),
        answer_pending=False,
        idle_from_session=False,
        heartbeat_s=0,
        own_max_duration=False,
    )
    idle_s = definition.flow.settings.idle.timeout_s
    await run.session.wait_for_idle()
    assert await run.outbox.flush(timeout=TURN_TIMEOUT_S)
    send = run.outbox._send

    async def held(batch: list[Any]) -> None:  # nothing leaves this agent until it is dead
        await dead.wait()
        await send(batch)

    run.outbox._send = held
    killer.armed = True
    with contextlib.suppress(Killed):
        await asyncio.wait_for(_play(run, script.turns[0], "t0", idle_s), TURN_TIMEOUT_S)
    assert killer.fired == "turn:assistant"
    await run.kill()

    lane.replace_replies([t.llm for t in script.turns if t.llm is not None])
    run = await attach_agent(
        env.client,
        call_id,
        f"held-agent-{uuid.uuid4().hex[:6]}",
        session_factory=session_factory,
        answer_pending=False,
        idle_from_session=False,
        heartbeat_s=0,
        own_max_duration=False,
    )
    record = await finish_call(run, script, definition, 0, handle.handle)
    got = {k: getattr(record, k) for k in COMPARED}
    assert not differences(got, want), "\n".join(differences(got, want))
    heard = said_failures(script.expect.said, script.expect.not_said, record.transcript)
    assert not heard, "\n".join(heard)
