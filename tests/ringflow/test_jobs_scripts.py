"""The order_jobs example's scripts (every group outcome) with the agent killed on every
turn, and what the agent does with an envelope (the LLM's context, the room)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from ringflow.agents.jobs import JobsFeed
from ringflow.callflow.jobs import ROOM_TOPIC
from ringflow.devstack import DevStack
from ringflow.simulation.scripts import load_script
from ringflow.simulation.simulator import environment, run_script
from tests.support.paths import ROOT

SCRIPTS = sorted((ROOT / "examples" / "scripts").glob("order_jobs_*.yaml"))


@pytest.mark.timeout(900)
async def test_every_outcome_survives_a_kill_on_every_turn(temporal_server: DevStack) -> None:
    assert len(SCRIPTS) >= 5
    failed: dict[str, Any] = {}
    async with environment(temporal_server.address) as (client, task_queue, llm, _):
        for path in SCRIPTS:
            base = await run_script(path, client, task_queue, llm)
            assert base.ok, (path.name, base.failures, base.error)
            for turn in range(len(load_script(path)[0].turns)):
                killed = await run_script(path, client, task_queue, llm, kill_at=turn)
                same = (killed.path, killed.state) == (base.path, base.state)
                if not killed.ok or not same:
                    failed[f"{path.name}@{turn}"] = (killed.failures, killed.error, killed.path)
    assert not failed, failed


class _Port:
    def __init__(self) -> None:
        self.notes: list[str] = []
        self.published: list[tuple[str, bytes]] = []

    async def note(self, text: str) -> None:
        self.notes.append(text)

    async def publish(self, topic: str, payload: bytes) -> None:
        self.published.append((topic, payload))


async def test_an_envelope_reaches_the_llm_context_and_the_room() -> None:
    port = _Port()
    feed = JobsFeed(SimpleNamespace(port=port))  # type: ignore[arg-type]
    env = {"type": "job_update", "group_id": "check_order-1", "job": "check_inventory", "data": {"step": 1}}
    await feed.deliver(env)
    assert port.notes == ['[jobs] check_order-1/check_inventory progress: {"step": 1}']
    assert port.published == [(ROOM_TOPIC, json.dumps(env).encode())]
    assert ROOM_TOPIC == "ringflow.jobs"


async def test_a_new_run_after_continue_as_new_is_read_from_its_start() -> None:
    """The log restarts at 0 in the next run: an agent whose cursor is past it reads it
    from the start instead of waiting for an index the new run may never reach."""
    port = _Port()
    env = {"type": "job_update", "group_id": "g-9", "job": "a", "data": 1, "n": 0}
    answers = {
        ("A", -1): {"next": 7},
        ("B", 7): {"next": 7, "envelopes": []},
        ("B", 0): {"next": 1, "envelopes": [env]},
    }
    run = ["A"]

    async def query(_name: str, after: int) -> dict[str, Any]:
        page = answers[(run[0], after)]
        base = {"run": run[0], "envelopes": [], "running": [], "cancellable": [], "interruptible": []}
        return {**base, "unspoken": None, "unrouted": [], **page}

    ctrl = SimpleNamespace(port=port, call=SimpleNamespace(handle=SimpleNamespace(query=query)))
    feed = JobsFeed(ctrl)  # type: ignore[arg-type]
    await feed.prime()
    assert feed.cursor == 7
    run[0] = "B"
    await feed.step()
    assert feed.cursor == 1 and port.notes == ["[jobs] g-9/a progress: 1"]
