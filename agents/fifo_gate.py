"""A first-in, first-out mutex whose free path costs no coroutine.

The controller runs the LLM's function calls one at a time, in the order the LLM made them
(``FlowController.on_tool_call``), and almost every call finds no other in progress. With
``asyncio.Lock`` each call paid for ``acquire``'s coroutine even then: a microsecond of the
transition hot path (``bench/agent.py``). Here the free path is a plain method; only a call
that has to wait awaits, on a future of its own, and is handed the gate in arrival order.

Its two fields are public so that the hot path can write the free path out (two method
calls less per transition): ``if gate.held or gate.waiting: await gate.enter()`` else
``gate.held = True``, and on the way out ``gate.leave()`` if ``gate.waiting`` else
``gate.held = False``: exactly what ``enter_now`` and ``leave`` do when nobody waits.
"""

from __future__ import annotations

import asyncio
from collections import deque


class FifoGate:
    """``if not gate.enter_now(): await gate.enter()`` ... ``finally: gate.leave()``."""

    __slots__ = ("held", "waiting")

    def __init__(self) -> None:
        self.held = False  # someone is inside (or was handed the gate and is waking up)
        self.waiting: deque[asyncio.Future[None]] = deque()  # in arrival order

    def enter_now(self) -> bool:
        """Take the gate if it is free and nobody waits for it (no queue jumping)."""
        if self.held or self.waiting:
            return False
        self.held = True
        return True

    async def enter(self) -> None:
        """Wait for the gate, behind everyone already waiting."""
        if self.enter_now():
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self.leave()  # handed the gate as it was cancelled: pass it on
            elif turn in self.waiting:  # a waiter handed over already skipped it otherwise
                self.waiting.remove(turn)
            raise

    def leave(self) -> None:
        """Hand the gate to the first waiter still waiting, or free it."""
        while self.waiting:
            turn = self.waiting.popleft()
            if not turn.done():
                turn.set_result(None)  # it holds the gate now: ``held`` stays True
                return
        self.held = False
