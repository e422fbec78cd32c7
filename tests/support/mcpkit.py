"""``tests/support/mcp_server.py`` (the ``mcp`` package's own server over Streamable HTTP)
run in a subprocess on loopback, and what it logged of each tool call."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ringflow.activities.mcp_client import list_tools
from ringflow.callflow.mcp_spec import McpServer
from tests.support.paths import ROOT
from tests.support.wfkit import wait_until


def unused_port() -> int:
    """A loopback port nothing listens on (an OS-chosen one, just released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A running MCP server: its URL, and the calls it logged as JSON lines."""

    def __init__(self, port: int, log: Path, proc: subprocess.Popen[bytes] | None = None) -> None:
        self.url = f"http://127.0.0.1:{port}/mcp"
        self.log = log
        self.proc = proc

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def calls(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]


@contextlib.contextmanager
def serving(log: Path) -> Iterator[Server]:
    """``tests/support/mcp_server.py`` in a subprocess on a free port, once it answers ``tools/list``."""
    port = unused_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.mcp_server", str(port), str(log)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = Server(port, log, proc)
    try:

        async def ready() -> bool:
            try:
                await list_tools(McpServer(url=server.url, timeout_s=2))
                return True
            except Exception:
                return proc.poll() is not None  # died: stop waiting, the assert below says so

        # a thread of its own: this also serves async tests, inside a running event loop
        with ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, wait_until(ready, timeout=30, what="the MCP server to answer")).result()
        assert proc.poll() is None, "the MCP server exited"
        yield server
    finally:
        server.stop()
