"""Bringing a new agent into a call whose agent went silent.

Dispatchers are pluggable and injected: the worker's entry point builds the one its settings
name (the LiveKit one, ``agents/livekit_api.py``, asks the LiveKit server to dispatch an agent
into the room; the simulator's wakes its own agents) and hands it to
:class:`AgentDispatch`. Without one, ``NoAgentDispatcher`` truthfully reports that no agent
is available, and the workflow ends the call with ``agent_lost`` after its attempts run out.
"""

from __future__ import annotations

from typing import Protocol

from temporalio import activity

from ringflow.contract.dial import DispatchRequest, DispatchResult


class Dispatcher(Protocol):
    async def dispatch(self, req: DispatchRequest) -> DispatchResult: ...


class NoAgentDispatcher:
    async def dispatch(self, req: DispatchRequest) -> DispatchResult:
        return DispatchResult(dispatched=False, detail="no agent dispatcher is configured")


class AgentDispatch:
    """The ``dispatch_agent`` activity bound to the dispatcher the worker was built with."""

    def __init__(self, dispatcher: Dispatcher | None = None) -> None:
        self.dispatcher: Dispatcher = dispatcher or NoAgentDispatcher()

    @activity.defn(name="dispatch_agent")
    async def dispatch_agent(self, req: DispatchRequest) -> DispatchResult:
        return await self.dispatcher.dispatch(req)
