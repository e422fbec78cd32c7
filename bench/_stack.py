"""A private Temporal dev server for one bench run (imported by the benches; not a bench).

Benches must not depend on, or disturb, a developer's server on 7233 or their
``.ringflow`` folder, so each run gets free ports and a temporary data directory that
is removed afterwards. The server is the same ``DevStack`` the tests and `ringflow dev`
use, so numbers reflect the real local setup (SQLite with WAL, the same dynamic config).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python bench/x.py` puts bench/, not the repo, on the path
    sys.path.insert(0, str(ROOT))

from temporalio.client import Client  # noqa: E402

from ringflow.codec import generate_key  # noqa: E402
from ringflow.devstack import DevStack, free_port  # noqa: E402
from ringflow.temporal_setup import connect  # noqa: E402

# Every Ringflow client refuses to start without a key (unless RINGFLOW_ENCRYPTION=0, as
# bench/load.py sets): a bench's server lives for the run, so does its key; child processes
# inherit it.
os.environ.setdefault("RINGFLOW_CODEC_KEYS", f"bench:{generate_key()}")


@dataclass
class BenchStack:
    stack: DevStack
    client: Client
    tmp: Path

    @property
    def database_url(self) -> str:
        """A fresh SQLite database for Ringflow's own tables (call records)."""
        return f"sqlite:///{self.tmp / 'ringflow.db'}"


@asynccontextmanager
async def bench_stack() -> AsyncIterator[BenchStack]:
    """Start a headless dev server on free ports in a temp dir; stop and delete it on exit."""
    with tempfile.TemporaryDirectory(prefix="ringflow-bench-") as tmp:
        stack = DevStack(
            port=free_port(), ui_port=free_port(), data_dir=Path(tmp) / "temporal", headless=True
        )
        await stack.start()
        try:
            client = await connect(stack.address, stack.namespace)
            yield BenchStack(stack=stack, client=client, tmp=Path(tmp))
        finally:
            stack.stop()
