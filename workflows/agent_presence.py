"""The agent's presence on the call: replacing an agent gone silent, and waiting for the
agent's hangup once the call has ended so that its last turns are in the record.

Functions on the running call's driver (``call_driver.py``, like ``dialing.py`` and ``room_events.py``);
deterministic workflow code.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from ringflow.callflow.events import HangUp
    from ringflow.contract.dial import DispatchRequest
    from ringflow.workflows import activity_calls as acts
    from ringflow.workflows.journal_recovery import recover_journal

if TYPE_CHECKING:
    from ringflow.workflows.call_driver import CallDriver

AGENT_END_GRACE_S = 10.0


async def final_turn(wf: CallDriver) -> None:
    """An end node's last turn is still being spoken when the engine ends the call: wait
    for the agent's hangup so that turn's transcript is recorded too. A call whose start
    action node routed it straight to an end node ends before any agent has attached:
    it waits for one to say that turn, not hang up on a caller who heard nothing."""
    if wf.call.hangup_seen:
        return
    if wf.call.flow_state.end_reason != "completed":
        await agent_catches_up(wf)
        return
    if wf.call.agent_id is None and wf.call.status != "dialing":
        return
    try:
        await workflow.wait_condition(
            lambda: wf.call.hangup_seen, timeout=timedelta(seconds=wf.inp.final_turn_grace_s)
        )
    except TimeoutError:
        wf.record_rejected(None, "no hangup from the agent after the last turn")


async def agent_catches_up(wf: CallDriver) -> None:
    """The workflow ended a live call its agent is still on (a transfer, the caller leaving
    as LiveKit's webhook said, a machine answering): the agent's last turns may still wait
    in its outbox (turns linger there to ride with the next event, agents/outbox.py), and
    they come with its hangup, sent once it has finished speaking. So the record waits for
    that hangup, briefly, or for LiveKit to say the agent left. Not after ``agent_lost``
    or ``error``: no agent is left to hang up."""
    if (
        wf.call.status != "live"
        or wf.call.agent_id is None
        or wf.agent_left
        or wf.call.flow_state.end_reason in ("agent_lost", "error")
    ):
        return
    try:
        await workflow.wait_condition(
            lambda: wf.call.hangup_seen or wf.agent_left,
            timeout=timedelta(seconds=min(wf.inp.final_turn_grace_s, AGENT_END_GRACE_S)),
        )
    except TimeoutError:
        wf.record_rejected(None, "note: no hangup from the agent after the call ended")


async def agent_lost(wf: CallDriver) -> None:
    wf.record_rejected(
        None,
        f"agent {wf.call.agent_id or '?'} silent for "
        f"{wf.inp.agent_timeout_s:g} s: agent_lost, dispatching another",
    )
    await recover_journal(wf, "agent lost")  # its last turns, before another takes over
    res = await acts.dispatch_agent(
        DispatchRequest(call_id=wf.inp.call_id, room=wf.inp.room, attempt=wf.call.dispatch_failures + 1)
    )
    wf.liveness.seen(workflow.now().timestamp())
    if res.dispatched:
        wf.call.dispatch_failures = 0
        return
    wf.call.dispatch_failures += 1
    if wf.call.dispatch_failures >= wf.inp.max_dispatch_attempts:
        wf.step(HangUp(reason="agent_lost", at=workflow.now().timestamp()))
    else:
        backoff = min(5.0, wf.inp.agent_timeout_s * 2.0 ** (wf.call.dispatch_failures - 1))
        await workflow.sleep(timedelta(seconds=backoff))
        wf.liveness.overdue_now(workflow.now().timestamp())
