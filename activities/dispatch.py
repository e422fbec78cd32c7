"""Bringing a new agent into a call whose agent went silent.

Dispatchers are pluggable: the LiveKit one (``agents/livekit_api.py``) asks the LiveKit server to
dispatch an agent into the room; until one is configured, ``NoAgentDispatcher``
truthfully reports that no agent is available, and the workflow ends the call with
``agent_lost`` after its attempts run out.
"""

from __future__ import annotations

import os
from typing import Protocol

from temporalio import activity

from activities.records import DispatchRequest, DispatchResult


class Dispatcher(Protocol):
    async def dispatch(self, req: DispatchRequest) -> DispatchResult: ...


class NoAgentDispatcher:
    async def dispatch(self, req: DispatchRequest) -> DispatchResult:
        return DispatchResult(dispatched=False, detail="no agent dispatcher is configured")


_DISPATCHERS: dict[str, Dispatcher] = {"none": NoAgentDispatcher()}


def register_dispatcher(name: str, dispatcher: Dispatcher) -> None:
    """Agents register theirs at worker start-up (``RINGFLOW_DISPATCHER`` picks one)."""
    _DISPATCHERS[name] = dispatcher


@activity.defn(name="dispatch_agent")
async def dispatch_agent(req: DispatchRequest) -> DispatchResult:
    name = os.environ.get("RINGFLOW_DISPATCHER", "none")
    dispatcher = _DISPATCHERS.get(name)
    if dispatcher is None:
        return DispatchResult(dispatched=False, detail=f"unknown dispatcher '{name}'")
    return await dispatcher.dispatch(req)
