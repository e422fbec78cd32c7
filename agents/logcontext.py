"""Which call a log line belongs to, for every line the agent logs while serving a call.

``bind_call`` is called once an agent takes a call; every task the call's session starts
afterwards inherits the binding (context variables), so lines logged by Ringflow, by
livekit-agents or by a plugin on behalf of this call all carry its call id, workflow id
and current node. ``ringflow.logs`` reads it when a record is created.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CallLogContext:
    call_id: str
    workflow_id: str
    current_node: Callable[[], str | None]


CALL_CONTEXT: ContextVar[CallLogContext | None] = ContextVar("ringflow_call", default=None)


def bind_call(call_id: str, workflow_id: str, current_node: Callable[[], str | None]) -> None:
    """From here on (this task and the tasks it starts), log lines belong to this call."""
    CALL_CONTEXT.set(CallLogContext(call_id, workflow_id, current_node))


def call_fields() -> dict[str, str]:
    """``call_id``, ``workflow_id`` and ``node`` of the call being served, if any."""
    ctx = CALL_CONTEXT.get()
    if ctx is None:
        return {}
    out = {"call_id": ctx.call_id, "workflow_id": ctx.workflow_id}
    try:
        node = ctx.current_node()
    except Exception:  # a half-built controller: the ids are what matters
        node = None
    if node:
        out["node"] = node
    return out
