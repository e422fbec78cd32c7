"""Only the call's current agent speaks for it: the epoch of each attach.

An agent that was replaced can still be running: a slow process the workflow took for
lost, a duplicate dispatch, an agent LiveKit reported gone whose lease the webhook relay
released. Its heartbeats, transitions and turns must not move the call, nor take the seq
numbers its successor uses (the successor's turns were then refused as already applied and
lost). So each ``attach`` (a new agent, not an agent settling) gets the next *epoch*, and
everything an agent sends carries the epoch it was given (``Snapshot.epoch``):

* what names an older epoch is refused before the inbox sees it (it takes no seq and is
  held for nothing) and recorded in ``rejected``; an update is refused with an
  ``AgentSuperseded`` error, which tells that agent to stop and leave the room;
* what names an epoch never issued is refused the same way;
* what names none is not fenced (an operator's ``hangup``, tests driving signals by hand,
  an agent of a release without epochs), but a heartbeat without one no longer names the
  call's agent once an epoch is issued: only an attach does;
* the epoch moves, the held events of the replaced agent are applied (the gap they wait
  for will not be filled: its journal was just read) and the snapshot is built, all in one
  workflow task: no event of the old agent can land between the new agent's snapshot and
  its first event.

The epoch is part of the call's progress, handed to the next run by continue-as-new (``Continuation.epoch``).
Deterministic workflow code; a refusal never fails a workflow task.
"""

from __future__ import annotations

from typing import Protocol

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from ringflow.contract.events import Heartbeat, InboxEvent
    from ringflow.workflows.call_progress import CallProgress
    from ringflow.workflows.inbox import Inbox


class EpochDriver(Protocol):
    """What the fence uses of the call's driver (``workflows/call_driver.CallDriver``, which
    asks it about every input: a Protocol, so the import runs one way)."""

    call: CallProgress
    inbox: Inbox

    def record_rejected(self, event_id: str | None, reason: str) -> None: ...
    def apply_ready(self, ready: list[InboxEvent], skipped: str | None = None) -> None: ...


SUPERSEDED = "AgentSuperseded"  # the error type of an update refused for its epoch (agents/controller.py)


def stale(current: int, epoch: int | None, what: str) -> str | None:
    """Why ``what``, sent under ``epoch``, does not speak for a call whose agent is of
    ``current``; None when it does (or names no epoch)."""
    if epoch is None or epoch == current:
        return None
    if epoch < current:
        return f"{what} from agent epoch {epoch} refused: the call's agent is epoch {current} (replaced)"
    return f"{what} names agent epoch {epoch}, never issued (the call is at {current}): refused"


def refused_event(d: EpochDriver, event: InboxEvent) -> str | None:
    """Why ``event`` is refused for who sent it, or None: checked before the inbox orders
    it, so a replaced agent's events take no seq and wait in no gap."""
    what = f"a {event.type} event"
    reason = stale(d.call.epoch, getattr(event, "epoch", None), what)
    if reason is not None or not isinstance(event, Heartbeat) or event.epoch is not None:
        return reason
    if d.call.epoch and event.agent_id != d.call.agent_id:  # no epoch, and not the call's agent
        return f"a heartbeat of agent {event.agent_id[:64]} refused: the call's agent is epoch {d.call.epoch}"
    return None


def refuse_update(d: EpochDriver, name: str, epoch: int | None, event_id: str | None = None) -> None:
    """Raise the update's refusal (recorded first) when its agent was replaced: the agent
    reads ``AgentSuperseded`` as its cue to stop and leave the room."""
    reason = stale(d.call.epoch, epoch, f"update '{name}'")
    if reason is None:
        return
    d.record_rejected(event_id, reason)
    raise ApplicationError(reason, type=SUPERSEDED, non_retryable=True)


def is_stale(d: EpochDriver, epoch: int | None) -> bool:
    """For a validator: let a stale update through to its handler, which records it."""
    return stale(d.call.epoch, epoch, "") is not None


def issue(d: EpochDriver, agent_id: str) -> None:
    """A new agent's attach: the next epoch, after applying what the replaced agent left
    held (its missing seq will not come). The caller builds the snapshot right after, in
    the same workflow task."""
    now = workflow.now().timestamp()
    why = f"never came from the agent that agent {agent_id[:64]} replaces"
    while (missing := d.inbox.waiting_for) is not None:
        d.apply_ready(*d.inbox.skip_gap(now, 0.0, why))
        if d.inbox.waiting_for == missing:  # a gap carried without its date: left to the timer
            break
    d.call.epoch += 1
