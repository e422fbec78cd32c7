"""What the agent decides alone, on the hot path: the engine's answer to a local function
call, what the LLM is told, and the port through which the controller drives the session.

Apart from ``agents/controller.py`` (the durable side: outbox, updates, resume) so the
bench's baseline can use ``call_locally`` without any of it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol, cast

from ringflow.callflow.effects import Rejected, RunFunction, SetNode, ToolResponse
from ringflow.callflow.end_reasons import EndReason
from ringflow.callflow.engine import Engine, Step
from ringflow.callflow.events import FunctionCalled
from ringflow.callflow.state import CallState


class SessionPort(Protocol):
    """What the controller needs of the live session (LiveKit, or a test double)."""

    # The hang-up ``end_call`` started (None until then): whoever closes the job awaits it,
    # so the room is gone and the last events are sent before the process moves on.
    ending: asyncio.Task[None] | None

    async def set_node(self, eff: SetNode) -> None: ...
    def say(self, text: str, allow_interrupt: bool) -> None: ...
    def reply(self, instructions: str | None, allow_interrupt: bool) -> None: ...
    async def end_call(self, reason: EndReason) -> None: ...


@dataclass(slots=True)
class ToolOutcome:
    result: Any
    run_llm: bool
    error: bool = False


def call_locally(
    engine: Engine, state: CallState, name: str, args: dict[str, Any], at: float
) -> tuple[Step, ToolOutcome, bool]:
    """A function the engine decides alone (transition, capture), as any engine answering an
    LLM applies it: the step, what the LLM is told, and whether an action node was entered
    (its function runs in the workflow, which decides where the call goes next). Nothing
    durable happens here: the agent bench's baseline calls this too, so what it measures
    beside it is durability alone.

    One pass over the effects with exact type tests: effects are final classes, and
    pydantic's isinstance is slow."""
    step = engine.apply(state, FunctionCalled(name=name, args=args, node=state.node, at=at))
    resp: ToolResponse | None = None
    runs = False
    for e in step.effects:
        kind = type(e)
        if kind is ToolResponse:
            if resp is None:
                resp = cast(ToolResponse, e)
        elif kind is RunFunction and cast(RunFunction, e).action:
            runs = True  # a `function:` action only has side effects: nothing to wait for
    if resp is None:
        reason = next((e.reason for e in step.effects if type(e) is Rejected), "not applied")
        return step, ToolOutcome({"status": "error", "error": reason}, True, True), False
    if resp.error:
        return step, ToolOutcome(resp.result, True, True), False
    return step, ToolOutcome(resp.result, resp.run_llm), runs
