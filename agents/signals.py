"""What the outbox sends, and how: transition events built off the hot path, batches cut
under the signal size limit, and the ``send`` that delivers them to the call's workflow.

Kept apart from ``agents/outbox.py``, which knows nothing of Temporal: the queue's
guarantees (order, retry, bounds) are tested with any ``send``; this is the one that
reaches a ``CallWorkflow``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from operator import itemgetter
from typing import Any

from temporalio.service import RPCError, RPCStatusCode

from ringflow.agents.metrics import EVENTS_DROPPED
from ringflow.agents.outbox import ReceiverGone, Send
from ringflow.contract.events import AgentEvent, CallEvent, EventBatch, TransitionEvent
from ringflow.contract.wire import encoded_bytes
from ringflow.workflows.client import MAX_SIGNAL_BYTES, CallHandle

log = logging.getLogger(__name__)
_BATCH_OVERHEAD = encoded_bytes(EventBatch(events=[]))


def step_event_id(turn: str, step: int, kind: str) -> str:
    """The id of an agent's event: ``<turn>:<step>:<kind>``, derived from the turn and the
    step within it, so an agent replaying a turn after a crash sends the ids the workflow
    already has. A function call's kind is ``fn:<name>`` (:func:`function_event_id`)."""
    return f"{turn}:{step}:{kind}"


def function_event_id(turn: str, step: int, name: str) -> str:
    return step_event_id(turn, step, f"fn:{name}")


class DeferredTransition(tuple[str, int, int, str, str, dict[str, Any], float, int | None]):
    """A transition event whose model is built by the sender, not on the hot path.

    The LLM's transition must cost the caller as little as an in-memory engine would; the
    pydantic model of the signal and its id string are most of what durability adds there,
    so they are built when the batch is sent. Its fields are already checked by the
    engine that accepted the transition.

    A tuple (``DeferredTransition((turn, step, seq, from_node, name, args, at, epoch))``):
    made in C, where an ``__init__`` setting eight slots cost the hot path a microsecond.
    """

    __slots__ = ()

    turn: str = property(itemgetter(0))  # type: ignore[assignment]
    step: int = property(itemgetter(1))  # type: ignore[assignment]
    seq: int = property(itemgetter(2))  # type: ignore[assignment]
    from_node: str = property(itemgetter(3))  # type: ignore[assignment]
    name: str = property(itemgetter(4))  # type: ignore[assignment]
    args: dict[str, Any] = property(itemgetter(5))  # type: ignore[assignment]
    at: float = property(itemgetter(6))  # type: ignore[assignment]
    epoch: int | None = property(itemgetter(7))  # type: ignore[assignment]

    @property
    def event_id(self) -> str:
        return function_event_id(self.turn, self.step, self.name)

    def build(self) -> TransitionEvent:
        return TransitionEvent(
            event_id=self.event_id,
            seq=self.seq,
            from_node=self.from_node,
            name=self.name,
            args=self.args,
            at=self.at,
            epoch=self.epoch,
        )


def built(events: list[Any]) -> list[AgentEvent]:
    return [e.build() if type(e) is DeferredTransition else e for e in events]


def sendable(events: list[AgentEvent], limit: int) -> list[AgentEvent]:
    """``events``, but each one that could never go in a signal (alone it encodes over
    ``limit``) replaced by a small note with its id and seq: retrying it would block every
    event behind it forever, and dropping it outright would leave the workflow waiting for
    its seq. The workflow records the note as a rejection; the agent logs it (id, type and
    size, never the text) and counts it in ``ringflow_agent_events_dropped_total``."""
    out: list[AgentEvent] = []
    for ev in events:
        size = encoded_bytes(ev) + _BATCH_OVERHEAD
        if size <= limit:
            out.append(ev)
            continue
        kind = ev.type
        log.error(
            "event %s (%s, %d bytes) can never be sent: the signal limit is %d bytes; dropped",
            getattr(ev, "event_id", "?"),
            kind,
            size,
            limit,
        )
        EVENTS_DROPPED.labels(kind).inc()
        reason = f"a {kind} event of {size} bytes, over the {limit} bytes a signal may carry"
        out.append(
            CallEvent(
                event_id=getattr(ev, "event_id", None) or "dropped",
                kind="note",
                at=ev.at,
                seq=getattr(ev, "seq", None),
                data={"dropped": kind, "reason": reason},
                epoch=getattr(ev, "epoch", None),
            )
        )
    return out


def chunks(events: list[AgentEvent], limit: int) -> Iterator[list[AgentEvent]]:
    """Consecutive runs of ``events`` whose EventBatch, encoded as the client sends it,
    stays under ``limit`` bytes (the same byte rule the client checks), so a batch of long
    turns becomes several signals instead of one the client refuses."""
    chunk: list[AgentEvent] = []
    size = _BATCH_OVERHEAD
    for ev in events:
        n = encoded_bytes(ev) + 1  # the comma between items
        if chunk and size + n > limit:
            yield chunk
            chunk, size = [], _BATCH_OVERHEAD
        chunk.append(ev)
        size += n
    if chunk:
        yield chunk


def workflow_sender(handle: CallHandle) -> Send:
    """A ``send`` for :class:`~agents.outbox.Outbox` that delivers through ``handle.batch``
    (the ``events`` signal), split into several signals in order when one would exceed the
    size limit.

    The same handle serves across a Temporal restart: the SDK's client reconnects on its own
    (a call while the server is down fails fast with ``RPCError``, which the outbox retries).
    A call whose workflow has completed (``RPCError`` NOT_FOUND: ended by an operator's
    hangup or the workflow's own backstop) raises :class:`ReceiverGone`, which stops the
    outbox: the agent hears of it and leaves the call instead of retrying until close.
    """

    async def send(events: list[AgentEvent]) -> None:
        for chunk in chunks(sendable(built(events), MAX_SIGNAL_BYTES), MAX_SIGNAL_BYTES):
            try:
                await handle.batch(EventBatch(events=chunk))
            except RPCError as exc:
                if exc.status == RPCStatusCode.NOT_FOUND:
                    raise ReceiverGone(f"call {handle.call_id} has ended: {exc.message}") from exc
                raise

    return send
