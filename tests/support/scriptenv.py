"""One simulator environment per test module: a real Temporal dev server, a worker of this
process and the scripted LLM (``ringflow.simulation.simulator.environment``), and the
scripts of one folder played in it as real calls."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ringflow.activities.persistence import dispose_engines
from ringflow.devstack import DevStack
from ringflow.simulation.scripted_llm import ScriptedLLM
from ringflow.simulation.simulator import SimulationResult, environment, run_script


@dataclass
class ScriptEnv:
    client: Any
    task_queue: str
    llm: ScriptedLLM
    scripts: Path

    async def play(self, name: str, **kw: Any) -> SimulationResult:
        return await run_script(self.scripts / name, self.client, self.task_queue, self.llm, **kw)


async def script_env(temporal_server: DevStack, scripts: Path) -> AsyncIterator[ScriptEnv]:
    """The body of a module-scoped fixture: ``yield from``-style, ``async for env in ...``."""
    if not temporal_server.running:
        await temporal_server.start()
    try:
        async with environment(temporal_server.address) as (client, task_queue, llm, _):
            yield ScriptEnv(client, task_queue, llm, scripts)
    finally:
        dispose_engines()
