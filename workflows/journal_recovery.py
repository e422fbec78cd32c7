"""Reading back what a lost agent queued and never sent (issue 13, ``agents/journal.py``).

An agent lets transcript turns wait in its outbox for up to a heartbeat interval, and writes
every queued event to the call's Redis stream first. When that agent is gone, the workflow
takes what it left from the stream (``read_turn_journal``, a local activity) and applies it
through its inbox exactly as the signal would have been: seq and event-id deduplication make
a replay of something already applied a no-op. It reads at three moments:

* another agent attaches (a resume): before the new agent is told the next seq, so its
  events cannot take the seqs the dead one used, and its context holds the dead one's turns;
* the agent is declared lost, before another is dispatched;
* the call ended without the agent's hang-up (an operator's hang-up, the agent lost for
  good, the max-duration backstop): before the record is built, so it has every turn.

Without Redis on the worker, or with a journal that cannot be read, nothing is recovered
and the call goes on: a note says so. Deterministic workflow code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from ringflow.contract.journal import JournalRead
    from ringflow.workflows import activity_calls as acts

if TYPE_CHECKING:
    from ringflow.workflows.call_driver import CallDriver


async def recover_journal(d: CallDriver, why: str) -> int:
    """Apply what the last agent journaled and the workflow lacks; how many events that was."""
    if d.call.agent_id is None:
        return 0
    try:
        found = await acts.read_turn_journal(JournalRead(call_id=d.inp.call_id, next_seq=d.inbox.next_seq))
    except ActivityError as exc:
        d.record_rejected(None, f"note: the agent's journal could not be read ({why}): {exc.cause or exc}")
        return 0
    applied = 0
    for event in found.events:
        seq = getattr(event, "seq", None)
        known = d.inbox.seen(getattr(event, "event_id", "")) if seq is None else seq < d.inbox.next_seq
        if known:
            continue  # applied already (it came by signal too, or while the read was out)
        d.receive(event)
        applied += 1
    if applied or found.unreadable or found.left:
        d.record_rejected(
            None,
            f"note: {applied} events recovered from the agent's journal ({why})"
            + (f"; {found.unreadable} unreadable" if found.unreadable else "")
            + (f"; {found.left} past the read limit, not recovered" if found.left else ""),
        )
    return applied
