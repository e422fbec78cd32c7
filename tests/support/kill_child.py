"""A separate agent process for the SIGKILL case of ``tests/agents/test_kill_resume.py``.

The in-process kill tests stop an agent by raising at a kill point; this program lets a
real process die there instead. It connects to the parent's Temporal server, attaches an
agent to a call the parent started (``attach_agent``, the same text-mode
``AgentSession`` as ``ringflow.simulation.simulator``, its LLM the parent's scripted endpoint reached
over HTTP on the given lane), plays the script's turns 0..N-1, and in turn N, at the
first kill point named ``--kill-point``, prints ``KILLPOINT <name>``, flushes stdout and
freezes until the parent SIGKILLs it.

Freezing happens inside the synchronous kill hook by blocking the event loop's thread,
not by raising: the process must stop exactly there, with whatever it had queued in its
outbox or in flight still in memory, as a crashed process would (raising would mark the
controller dead and abandon the outbox first, which is the in-process simulation).

Exit status: 2 when the kill point was never reached (stdout says ``NOKILL``).

    python -m tests.support.kill_child --address 127.0.0.1:7233 --call-id C --lane C \\
        --llm-url http://127.0.0.1:8085/v1 --script examples/scripts/x.yaml --kill-turn 2 \\
        --kill-point after_function
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import threading
from pathlib import Path

from livekit.agents import AgentSession
from livekit.plugins import openai as lk_openai

from ringflow.agents.runner import attach_agent
from ringflow.callflow.loader import load_flow
from ringflow.contract.updates import Snapshot
from ringflow.simulation.kill_points import kill_hooks
from ringflow.simulation.scripted_llm import LANE_HEADER
from ringflow.simulation.scripts import load_script
from ringflow.simulation.simulator import TURN_TIMEOUT_S, _play
from ringflow.temporal_setup import connect

KILLPOINT = "KILLPOINT"


def scripted_session(base_url: str, lane: str) -> AgentSession:
    """A text-mode session whose LLM is the scripted lane ``lane``, as ``run_script`` builds it."""
    model = lk_openai.LLM(
        model="scripted", base_url=base_url, api_key="scripted", extra_headers={LANE_HEADER: lane}
    )
    return AgentSession(llm=model, user_away_timeout=None)


class Freeze:
    """Kill hook: when armed, the first matching point is announced and the process stops."""

    def __init__(self, point: str | None) -> None:
        self.point = point
        self.armed = False

    def __call__(self, point: str) -> None:
        if self.armed and (self.point is None or point == self.point):
            sys.stdout.write(f"{KILLPOINT} {point}\n")
            sys.stdout.flush()
            threading.Event().wait()  # never set: only SIGKILL ends this


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--address", required=True)
    p.add_argument("--namespace", default="default")
    p.add_argument("--call-id", required=True)
    p.add_argument("--lane", required=True, help="the scripted LLM lane (X-Ringflow-Script header)")
    p.add_argument("--llm-url", required=True, help="the scripted LLM's base URL")
    p.add_argument("--script", required=True)
    p.add_argument("--kill-turn", type=int, required=True)
    p.add_argument("--kill-point", default=None, help="a kill point name; default: the first one reached")
    return p.parse_args(argv)


async def main(argv: list[str]) -> int:
    args = parse(argv)
    script, flow_path = load_script(Path(args.script))
    idle_s = load_flow(flow_path).flow.settings.idle.timeout_s
    client = await connect(args.address, args.namespace)
    freeze = Freeze(args.kill_point)

    def session_factory(snap: Snapshot) -> AgentSession:
        return scripted_session(args.llm_url, args.lane)

    run = await attach_agent(
        client,
        args.call_id,
        f"child-agent-{os.getpid()}",
        session_factory=session_factory,
        hooks=kill_hooks(freeze),
        idle_from_session=False,
        heartbeat_s=0,
        own_max_duration=False,
    )
    await run.session.wait_for_idle()  # the greeting is spoken before the caller answers
    for i, turn in enumerate(script.turns[: args.kill_turn + 1]):
        if i == args.kill_turn:
            # The parent replays only turn N, so earlier turns must be in the workflow first
            # (as run_script does): milliseconds apart here, they could still be queued.
            await run.outbox.flush(timeout=TURN_TIMEOUT_S)
            freeze.armed = True
        await asyncio.wait_for(_play(run, turn, f"t{i}", idle_s), TURN_TIMEOUT_S)
    print("NOKILL", flush=True)
    await run.close()
    return 2


if __name__ == "__main__":
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    sys.exit(asyncio.run(main(sys.argv[1:])))
