"""A dispatcher for simulation: the lost-agent path without a LiveKit server.

The workflow's ``dispatch_agent`` activity runs in the simulator's own worker (built with
this dispatcher), so a dispatch can simply wake the simulator, which then attaches a new
agent to the call, as LiveKit would start a new job after ``CreateDispatch``.
"""

from __future__ import annotations

import asyncio

from ringflow.activities.dispatch import DispatchRequest, DispatchResult


class LocalDispatcher:
    def __init__(self) -> None:
        self._waiting: dict[str, asyncio.Queue[DispatchRequest]] = {}

    def watch(self, call_id: str) -> asyncio.Queue[DispatchRequest]:
        """Dispatches for ``call_id`` arrive on this queue."""
        return self._waiting.setdefault(call_id, asyncio.Queue())

    def forget(self, call_id: str) -> None:
        self._waiting.pop(call_id, None)

    async def dispatch(self, req: DispatchRequest) -> DispatchResult:
        queue = self._waiting.get(req.call_id)
        if queue is None:
            return DispatchResult(dispatched=False, detail=f"no local agent pool for call {req.call_id}")
        queue.put_nowait(req)
        return DispatchResult(dispatched=True, detail="local agent dispatched")


LOCAL = LocalDispatcher()  # keyed by call id, so every simulator worker of a process can share it
