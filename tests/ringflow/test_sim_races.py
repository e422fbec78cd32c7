"""Races that made a passing script fail on a loaded machine (issue 23 §2), made certain by
a hook instead of waiting for load to produce them: answers held and handed back in reverse
order, and the stall that silenced a healthy agent pinned at its cause (the first agent
session's loading, here; an extraction's client, in ``tests/test_extraction.py``). Each
fails without its fix on any machine; ``bench/sim_under_load.py`` plays every script many
times under real load.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ringflow.contract.updates import CallFunctionRequest, CallFunctionResult
from ringflow.devstack import DevStack
from ringflow.simulation.simulator import environment, run_script
from ringflow.workflows.client import CallHandle
from tests.support.paths import TESTS

SCRIPTS = TESTS / "fixtures" / "scripts"

pytestmark = pytest.mark.timeout(300)  # a backstop for a hung test: each step is bounded inside


class AnswersInReverse:
    """``call_function`` with each answer held until every call started while it was in
    flight has been answered: the later call's answer reaches the agent first, as it did
    under load. Calls that never overlap pass straight through."""

    def __init__(self) -> None:
        self.inner = CallHandle.call_function
        self.answered: list[asyncio.Event] = []
        self.overlaps = 0

    async def __call__(self, handle: CallHandle, req: CallFunctionRequest) -> CallFunctionResult:
        mine = asyncio.Event()
        self.answered.append(mine)
        started = len(self.answered)
        try:
            return await self.inner(handle, req)
        finally:
            later = self.answered[started:]
            self.overlaps += bool(later)
            for ev in later:
                await ev.wait()
            mine.set()


async def test_a_refused_call_answered_after_the_handler_that_moved_the_call(
    temporal_server: DevStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One reply calls ``check_identity`` with an argument too many (refused), then with the
    right one (its handler moves the call to ``remind``). The refusal's answer carries the
    state from before the move; arriving last, it put the agent back on ``verify_identity``
    while the workflow went on, and the next turn's ``will_attend`` was refused as unknown.
    The agent runs a reply's calls one after the other, so no answer can overtake another."""
    reverse = AnswersInReverse()

    async def call_function(self: CallHandle, req: CallFunctionRequest) -> Any:
        return await reverse(self, req)

    monkeypatch.setattr(CallHandle, "call_function", call_function)
    async with environment(temporal_server.address) as (client, task_queue, llm, _):
        result = await run_script(SCRIPTS / "refused_then_handler.yaml", client, task_queue, llm)
    assert result.ok, (result.failures, result.rejected, result.error)
    assert result.path == ["verify_identity", "remind", "confirmed"]
    refused = [(r["what"], r["why"]) for r in result.rejected]
    assert len(refused) == 1 and "shoe_size" in refused[0][1], refused  # the bad call, nothing else
    assert [t["node"] for t in result.transcript if t["text"] == "Wonderful. Goodbye!"] == ["confirmed"]
    assert len(reverse.answered) == 2 and reverse.overlaps == 0


async def test_the_agent_machinery_is_loaded_before_the_first_call(
    temporal_server: DevStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process's first agent session loads livekit-agents' turn detector on the event loop
    the simulator's worker and agents share (seconds on a loaded machine). The first script's
    agent paid it after attaching, silent meanwhile, and its workflow's agent timeout
    took it for lost. The simulator's environment pays it before the first call starts."""
    from livekit.agents import AgentSession

    started: list[str] = []
    real = AgentSession.start

    async def start(self: AgentSession, *args: Any, **kwargs: Any) -> Any:
        started.append("session")
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(AgentSession, "start", start)
    async with environment(temporal_server.address):
        assert started == ["session"]  # before any call
