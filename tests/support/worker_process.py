"""``ringflow worker`` as a real process with its health port, for the tests that signal,
kill or restart a worker (shutdown, packaging, TLS, upgrades)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from ringflow.devstack import free_port
from tests.support.wfkit import wait_until

# No agent drives these calls: the liveness timer must not end one as agent_lost while a
# busy machine runs the test.
NO_AGENT = 3600.0


class Worker:
    """``ringflow worker`` in its own process, with its health port."""

    def __init__(
        self,
        address: str,
        task_queue: str,
        database_url: str,
        log: Path,
        argv: list[str] | None = None,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.health_port = free_port()
        self.log = log
        env = {
            **os.environ,
            "RINGFLOW_TEMPORAL_ADDRESS": address,
            "RINGFLOW_TASK_QUEUE": task_queue,
            "RINGFLOW_DATABASE_URL": database_url,
            "RINGFLOW_METRICS_PORT": str(free_port()),
            "RINGFLOW_HEALTH_PORT": str(self.health_port),
            "RINGFLOW_GRACEFUL_SHUTDOWN_S": "5",
            **(env or {}),
        }
        with log.open("wb") as out:  # a file, not a pipe: a full pipe would block the worker
            self.proc = subprocess.Popen(
                argv or [sys.executable, "-m", "ringflow.cli", "worker"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=out,
                cwd=cwd,
            )

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    @property
    def identity_prefix(self) -> str:
        return f"{self.proc.pid}@"  # the SDK's default worker identity is pid@hostname

    def probe(self, path: str) -> tuple[int, dict[str, object]] | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}{path}", timeout=2) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())
        except OSError:
            return None

    async def wait_ready(self) -> None:
        async def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited: {self.stderr()}")
            got = self.probe("/readyz")
            return got is not None and got[0] == 200

        await wait_until(ready, timeout=30, what="worker /readyz 200")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
