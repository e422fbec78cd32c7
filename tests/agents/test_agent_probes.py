"""``ringflow agent``'s readiness and load, against LiveKit's agent-worker protocol.

No LiveKit server runs here: the agent talks to the protocol-level fake of LiveKit's
``/agent`` endpoint (``ringflow/simulation/livekit_fake_agents.py``), which can play a
LiveKit that refuses connections. What this shows on a real agent process: ``/readyz``
answers 503 until LiveKit registered the agent and again as soon as it lost LiveKit, while
``/`` (liveness) stays 200 through the retries; and the agent's load is its calls over
``RINGFLOW_AGENT_MAX_CALLS``, so with one call it reports itself full to LiveKit and
declines the next, whatever the machine's CPU does.
"""

from __future__ import annotations

import asyncio
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from livekit.protocol import agent as lk_agent

from ringflow.devstack import free_port
from ringflow.servers.agent_probes import calls_load
from ringflow.simulation.livekit_fake_agents import FakeAgentEndpoint
from tests.support.wfkit import wait_until


def _status(port: int, path: str) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return None


def test_load_is_the_share_of_the_call_capacity() -> None:
    assert calls_load(0, 25) == 0.0
    assert calls_load(5, 20) == 0.25
    assert calls_load(25, 25) >= 1.0  # LOAD_THRESHOLD: full


@pytest.mark.timeout(300)  # a real agent process: forkserver, prewarmed job processes
async def test_ready_only_while_registered_and_full_at_max_calls(tmp_path: Path) -> None:
    port = free_port()
    silent = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)  # accepts, never answers
    blackhole = silent.sockets[0].getsockname()[1]
    async with FakeAgentEndpoint() as fake:
        await fake.refuse()  # LiveKit is unreachable when the agent starts
        env = {
            **os.environ,
            "LIVEKIT_URL": fake.url,
            "LIVEKIT_API_KEY": "APIfake",
            "LIVEKIT_API_SECRET": "secret-for-tests-only-0123456789",
            "RINGFLOW_AGENT_HEALTH_PORT": str(port),
            "RINGFLOW_AGENT_METRICS_PORT": "0",
            "RINGFLOW_AGENT_MAX_CALLS": "1",
            "RINGFLOW_AGENT_DRAIN_TIMEOUT_S": "1",
            "RINGFLOW_TEMPORAL_ADDRESS": f"127.0.0.1:{blackhole}",
        }
        log = tmp_path / "agent.log"
        with log.open("wb") as out:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "ringflow.cli", "agent", env=env, stdout=out, stderr=out
            )

        async def status(path: str) -> int | None:
            if proc.returncode is not None:
                raise AssertionError(f"ringflow agent exited:\n{log.read_text()[-3000:]}")
            return await asyncio.to_thread(_status, port, path)

        def answers(path: str, code: int) -> Callable[[], Awaitable[bool]]:
            async def check() -> bool:
                return await status(path) == code

            return check

        def holds(condition: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
            async def check() -> bool:
                return condition()

            return check

        try:
            await wait_until(holds(lambda: fake.refused >= 1), timeout=90, what="the agent trying LiveKit")
            await wait_until(answers("/", 200), timeout=30, what="the liveness probe answering")
            assert await status("/readyz") == 503  # alive, retrying, but LiveKit offers it nothing
            assert fake.registrations == 0

            fake.accept()
            await wait_until(answers("/readyz", 200), timeout=60, what="ready once registered")
            assert fake.registrations == 1

            # One call takes the whole capacity (RINGFLOW_AGENT_MAX_CALLS=1): the agent says
            # it is full and declines the next offer. The call's entrypoint hangs reaching
            # Temporal (a port that never answers), so it stays in progress.
            await fake.offer_job("J_1")
            await wait_until(holds(lambda: fake.answer("J_1") is not None), timeout=30, what="an answer")
            assert fake.answer("J_1").available is True  # type: ignore[union-attr]
            await fake.assign("J_1")

            def full() -> bool:
                return any(
                    m.update_worker.status == lk_agent.WorkerStatus.WS_FULL and m.update_worker.load >= 1.0
                    for m in fake.of("update_worker")
                )

            # A job process starts for the call first (tens of seconds on a loaded CI box).
            await wait_until(holds(full), timeout=120, what="the agent reporting itself full")
            await fake.offer_job("J_2")
            await wait_until(holds(lambda: fake.answer("J_2") is not None), timeout=30, what="an answer")
            assert fake.answer("J_2").available is False  # type: ignore[union-attr]

            await fake.refuse()  # LiveKit lost: the open connection drops, reconnects are refused
            await wait_until(answers("/readyz", 503), timeout=30, what="unready once LiveKit is lost")
            assert await status("/") == 200  # still alive: it keeps retrying
        finally:
            silent.close()
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
