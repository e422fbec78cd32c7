"""The caller's key presses, one at a time from LiveKit (``sip_dtmf_received``), collected into
the digit strings a node's ``dtmf`` spec asks for: complete at ``max_digits``, at the
``terminator`` (not included), or ``timeout_s`` after the last key. On a node without a spec
each key goes on at once. The controller then applies them (``FlowController.on_dtmf``).
"""

from __future__ import annotations

import asyncio
import contextlib
import re

from ringflow.agents.controller import FlowController
from ringflow.callflow.model import DtmfSpec

KEY = re.compile(r"^[0-9*#A-Da-d]$")


class KeyCollector:
    def __init__(self, controller: FlowController) -> None:
        self.controller = controller
        self.keys = ""
        self.node: str | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def spec(self) -> DtmfSpec | None:
        node = self.controller.node
        if node is None or node not in self.controller.engine.flow.nodes:
            return None
        return self.controller.engine.flow.nodes[node].node.dtmf

    async def press(self, key: str) -> None:
        """One key; anything that is not a DTMF key is ignored (it cannot come from a phone)."""
        if not KEY.match(key or "") or self.controller.ended:
            return
        if self.node != self.controller.node:  # keys started on a node the call has left
            self.keys = ""
            self.node = self.controller.node
        spec = self.spec()
        if spec is None:
            await self.controller.on_dtmf(key)
            return
        if spec.terminator is not None and key == spec.terminator:
            await self.flush()
            return
        self.keys += key
        if len(self.keys) >= spec.max_digits:
            await self.flush()
            return
        self._cancel_timer()
        self._timer = asyncio.get_running_loop().call_later(spec.timeout_s, self._on_timeout)

    def _on_timeout(self) -> None:
        task = asyncio.get_running_loop().create_task(self.flush())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def flush(self) -> None:
        """What was collected goes on now (the terminator, the limit, the timeout or the end
        of a simulated turn); nothing happens when nothing was pressed."""
        self._cancel_timer()
        keys, self.keys = self.keys, ""
        if keys:
            await self.controller.on_dtmf(keys)

    def close(self) -> None:
        self._cancel_timer()
        for task in self._tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            self._tasks.clear()
