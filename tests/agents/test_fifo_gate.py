"""The controller's one-call-at-a-time gate: calls run in arrival order, and a waiter
cancelled before or after it was handed the gate never leaves it stuck."""

from __future__ import annotations

import asyncio

import pytest

from ringflow.agents.fifo_gate import FifoGate


async def test_waiters_enter_in_arrival_order_one_at_a_time() -> None:
    gate = FifoGate()
    order: list[int] = []
    inside = 0

    async def call(i: int) -> None:
        nonlocal inside
        if not gate.enter_now():
            await gate.enter()
        try:
            inside += 1
            assert inside == 1
            order.append(i)
            await asyncio.sleep(0)  # yield while holding it: the others must wait
        finally:
            inside -= 1
            gate.leave()

    await asyncio.gather(*(call(i) for i in range(6)))
    assert order == list(range(6)) and not gate.held


async def test_a_newcomer_does_not_jump_a_waiter_just_handed_the_gate() -> None:
    gate = FifoGate()
    assert gate.enter_now()
    waiter = asyncio.ensure_future(gate.enter())
    await asyncio.sleep(0)  # queued
    gate.leave()  # handed to the waiter, which has not run yet
    assert gate.held and not gate.enter_now()
    await waiter
    gate.leave()
    assert not gate.held


async def test_a_cancelled_waiter_leaves_the_queue_and_the_gate_free() -> None:
    gate = FifoGate()
    assert gate.enter_now()
    first = asyncio.ensure_future(gate.enter())
    second = asyncio.ensure_future(gate.enter())
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    gate.leave()  # skips the cancelled one
    await second
    assert gate.held
    gate.leave()
    assert not gate.held and gate.enter_now()


async def test_a_waiter_cancelled_after_the_handover_passes_the_gate_on() -> None:
    gate = FifoGate()
    assert gate.enter_now()
    first = asyncio.ensure_future(gate.enter())
    second = asyncio.ensure_future(gate.enter())
    await asyncio.sleep(0)
    gate.leave()  # handed to first ...
    first.cancel()  # ... which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await first
    await second  # it passed the gate on
    gate.leave()
    assert not gate.held
