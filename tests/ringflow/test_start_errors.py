"""A process that cannot start says why in one line, never a traceback; a worker waits out
a Temporal that is not there yet.

Each command runs as the operator runs it (a subprocess); what it prints on stderr is
asserted whole: one ``error: ...`` line naming the fix.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringflow.devstack import DevStack, free_port
from tests.support.cli_process import one_error_line, ringflow
from tests.support.paths import ROOT

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port someone else listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", free_port()))
        sock.listen()
        yield sock.getsockname()[1]


def base_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **extra}


async def test_agent_without_its_extra_says_which_to_install() -> None:
    """``sys.modules['livekit'] = None`` makes every ``import livekit...`` fail as on an
    install without the [agent] extra."""
    code = "import sys; sys.modules['livekit'] = None; sys.argv = ['ringflow', 'agent']; " + (
        "from ringflow.cli import main; main()"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, env=base_env(), cwd=ROOT, stderr=asyncio.subprocess.PIPE
    )
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2
    line = one_error_line(err.decode())
    assert "[agent] extra" in line and "pip install 'ringflow[agent]'" in line


async def test_worker_with_a_busy_metrics_port(temporal_server: DevStack, busy_port: int) -> None:
    env = base_env(RINGFLOW_TEMPORAL_ADDRESS=temporal_server.address, RINGFLOW_METRICS_PORT=str(busy_port))
    code, _, err = await ringflow(env, "worker")
    assert code == 2
    assert f"metrics port 127.0.0.1:{busy_port} is not free" in one_error_line(err)
    assert "RINGFLOW_METRICS_PORT" in err


async def test_codec_server_on_a_busy_port(busy_port: int) -> None:
    code, _, err = await ringflow(base_env(), "codec-server", "--no-auth", "--port", str(busy_port))
    assert code == 2
    assert f"cannot serve on 127.0.0.1:{busy_port}" in one_error_line(err)


@pytest.mark.parametrize("setting", ["RINGFLOW_CODEC_SERVER_PORT", "RINGFLOW_METRICS_PORT"])
async def test_dev_fails_loudly_when_a_port_it_needs_is_taken(
    setting: str, busy_port: int, tmp_path: Path
) -> None:
    env = base_env(
        **{"RINGFLOW_CODEC_SERVER_PORT": str(free_port()), "RINGFLOW_METRICS_PORT": str(free_port())}
    )
    env[setting] = str(busy_port)
    args = ["dev", "--port", str(free_port()), "--ui-port", str(free_port()), "--data-dir", str(tmp_path)]
    code, _, err = await ringflow(env, *args)
    assert code == 1
    line = one_error_line(err)
    assert f"127.0.0.1:{busy_port} is not free" in line and setting in line
    assert not (tmp_path / "temporal.db").exists(), "nothing started"


async def test_worker_retries_its_first_connection_until_temporal_is_up(tmp_path: Path) -> None:
    port = free_port()
    env = base_env(
        RINGFLOW_TEMPORAL_ADDRESS=f"127.0.0.1:{port}",
        RINGFLOW_METRICS_PORT=str(free_port()),
        RINGFLOW_DATABASE_URL=f"sqlite:///{tmp_path / 'calls.db'}",
        RINGFLOW_TASK_QUEUE="retry-first-connect",
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ringflow.cli", "worker", env=env, cwd=ROOT, stderr=asyncio.subprocess.PIPE
    )
    assert proc.stderr is not None
    seen: list[str] = []

    async def line_with(event: str) -> dict[str, object]:
        while True:
            raw = (await proc.stderr.readline()).decode()  # type: ignore[union-attr]
            assert raw, f"the worker exited: {''.join(seen)}"
            seen.append(raw)
            entry = json.loads(raw)  # every line is a JSON log line
            if entry.get("event") == event:
                return entry

    server = DevStack(port=port, data_dir=tmp_path / "temporal", headless=True)
    try:
        async with asyncio.timeout(120):
            waiting = await line_with("temporal_unreachable")
            assert f"127.0.0.1:{port}" in str(waiting["message"]) and "retrying" in str(waiting["message"])
            await server.start()  # Temporal comes up after the worker: it connects, no restart
            await line_with("worker_started")
            proc.send_signal(signal.SIGTERM)
            rest = (await proc.stderr.read()).decode()  # what it said while it stopped
            seen.append(rest)
            assert await proc.wait() == 0, rest[-2000:]
        assert not any("Traceback" in line for line in seen)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        server.stop()


async def test_the_script_flushes_and_runs_exit_handlers_when_it_skips_finalizing() -> None:
    """A process that loaded the Temporal SDK leaves without finalizing (the SDK's Tokio
    threads could abort it there): what finalizing would do that matters still happens, the
    exit handlers run, buffered output arrives, the command's status is the process's."""
    code = (
        "import atexit, sys, temporalio.client; "
        "atexit.register(lambda: print('exit handler ran', file=sys.stderr)); "
        "sys.stdout.write('buffered, no newline'); "
        "sys.argv = ['ringflow', 'flow', 'validate', 'no/such/flow.yaml']; "
        "from ringflow.cli import entry_point; entry_point()"
    )
    env = {k: v for k, v in base_env().items() if k != "PYTHONUNBUFFERED"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        env=env,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2, err.decode()
    assert out.decode().startswith("buffered, no newline")
    assert "exit handler ran" in err.decode() and "no/such/flow.yaml" in err.decode()
