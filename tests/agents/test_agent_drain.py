"""``ringflow agent`` on SIGTERM: LiveKit's drain, as far as it can be seen without media.

No LiveKit server runs here, so the agent talks to a protocol-level fake of LiveKit's
agent-worker endpoint (``ringflow/simulation/livekit_fake_agents.py``: a WebSocket of
``livekit.protocol.agent`` protobuf messages, the ``WorkerMessage``/``ServerMessage`` pair
the real server speaks), stood up at its network boundary. What this shows: the agent
registers under Ringflow's agent name; its health endpoint (the pod's probe target)
answers; on SIGTERM it tells LiveKit it is full, refuses the jobs LiveKit still offers,
keeps running while a job it took before is still in progress, and exits cleanly when the
drain is over. The job here
never reaches a room (no media in the fake): its entrypoint hangs on a Temporal port
that never answers, so the drain runs to ``RINGFLOW_AGENT_DRAIN_TIMEOUT_S``; that a
real call ending early ends the drain early is LiveKit's ``drain()`` and not shown here.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from livekit.protocol import agent as lk_agent

from ringflow.devstack import free_port
from ringflow.simulation.livekit_fake_agents import FakeAgentEndpoint
from tests.support.wfkit import wait_until


@pytest_asyncio.fixture
async def livekit_agent_endpoint() -> AsyncIterator[FakeAgentEndpoint]:
    async with FakeAgentEndpoint() as fake:
        yield fake


def _health(port: int) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as resp:
            return resp.status
    except OSError:
        return None


@pytest.mark.timeout(300)  # a real agent process: forkserver, prewarmed job processes, the drain
async def test_sigterm_drains_the_agent(livekit_agent_endpoint: FakeAgentEndpoint, tmp_path: Path) -> None:
    fake = livekit_agent_endpoint
    health_port = free_port()
    silent = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)  # accepts, never answers
    blackhole = silent.sockets[0].getsockname()[1]
    env = {
        **os.environ,
        "LIVEKIT_URL": fake.url,
        "LIVEKIT_API_KEY": "APIfake",
        "LIVEKIT_API_SECRET": "secret-for-tests-only-0123456789",
        "RINGFLOW_AGENT_HEALTH_PORT": str(health_port),
        "RINGFLOW_AGENT_METRICS_PORT": "0",
        "RINGFLOW_AGENT_DRAIN_TIMEOUT_S": "10",
        "RINGFLOW_TEMPORAL_ADDRESS": f"127.0.0.1:{blackhole}",
        "RINGFLOW_LOG_LEVEL": "INFO",
    }
    log = tmp_path / "agent.log"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "ringflow.cli", "agent", env=env, stdout=out, stderr=out
        )
    try:
        await wait_until(lambda: _ready(fake, proc), timeout=90, what="agent registered with LiveKit")
        register = fake.of("register")[0].register
        assert register.agent_name == "ringflow" and register.type == lk_agent.JobType.JT_ROOM

        async def healthy() -> bool:
            return await asyncio.to_thread(_health, health_port) == 200

        await wait_until(healthy, timeout=30, what="LiveKit's health endpoint answers 200")

        # A call in progress: a job offered, accepted and assigned. Its entrypoint is stuck
        # reaching Temporal (a port that accepts and never answers), so it stays running.
        await fake.offer_job("J_live")
        await wait_until(lambda: _answered(fake, "J_live"), timeout=30, what="the first job's answer")
        assert fake.answer("J_live").available is True  # type: ignore[union-attr]
        await fake.assign("J_live")

        proc.send_signal(signal.SIGTERM)

        async def full() -> bool:
            return any(
                m.update_worker.status == lk_agent.WorkerStatus.WS_FULL for m in fake.of("update_worker")
            )

        await wait_until(full, timeout=30, what="the agent to tell LiveKit it is full (draining)")
        await fake.offer_job("J_new")
        await wait_until(lambda: _answered(fake, "J_new"), timeout=30, what="the answer while draining")
        assert fake.answer("J_new").available is False  # type: ignore[union-attr]  # no new calls
        assert proc.returncode is None  # still draining: the call in progress holds it
        # The stuck call never ends, so the drain runs out (RINGFLOW_AGENT_DRAIN_TIMEOUT_S) and
        # the agent shuts down cleanly; a real call would end first and the agent exit then.
        code = await asyncio.wait_for(proc.wait(), 90)
        assert code == 0, log.read_text()[-3000:]
        assert "drain timed out" in log.read_text()
    finally:
        silent.close()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def _answered(fake: FakeAgentEndpoint, job_id: str) -> bool:
    return fake.answer(job_id) is not None


async def _ready(fake: FakeAgentEndpoint, proc: asyncio.subprocess.Process) -> bool:
    if proc.returncode is not None:
        raise AssertionError(f"ringflow agent exited with {proc.returncode}")
    return bool(fake.of("register")) and fake.ws is not None
