"""What LiveKit says about a call's room (``RoomEvent``, relayed by ``agents/webhooks.py``), applied.

The agent's heartbeats notice a dead agent only after ``agent_timeout_s`` of silence, which
the caller hears as silence. LiveKit knows at once: the agent's participant leaves the room.
So:

* ``agent_left`` for the call's current agent, while the call is live and the agent never
  said it was hanging up, makes the workflow replace it now (the main loop finds the agent
  overdue and runs ``agent_lost``). An earlier agent leaving (a late or reordered webhook
  after its replacement attached) changes nothing.
* ``caller_left`` (the SIP participant left) ends a live call ``user_hangup``; while the
  phone rings it is the dial's outcome, which the dial activity reports, and during a
  transfer it is the transfer working, which the transfer's result reports.
* ``room_finished`` ends a call that is still going (``user_hangup``: nobody is left).

Each event is applied once (LiveKit retries webhooks: duplicates are expected); an event
about a call that has ended is ignored. Heartbeats stay as the backstop when webhooks are
not configured. Deterministic workflow code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from ringflow.callflow.events import HangUp
    from ringflow.contract.room import RoomEvent

if TYPE_CHECKING:
    from ringflow.workflows.call_driver import CallDriver

SEEN_MAX = 200


def transferring(wf: CallDriver) -> bool:
    """A transfer entry is running: the caller leaving the room is that transfer working."""
    nodes = wf.engine.flow.nodes
    for run in wf.call.flow_state.pending.values():
        fn = nodes[run.node].functions.get(run.name) if run.node in nodes else None
        if fn is not None and fn.kind == "transfer":
            return True
    return False


def on_room_event(wf: CallDriver, ev: RoomEvent, seen: list[str]) -> None:
    if ev.event_id in seen:
        return
    seen.append(ev.event_id)
    if len(seen) > SEEN_MAX:
        del seen[: len(seen) - SEEN_MAX]
    if (
        wf.call.flow_state.ended
    ):  # the agent leaving now ends the wait for its hangup (agent_presence.final_turn)
        wf.agent_left = wf.agent_left or (ev.kind == "agent_left" and ev.identity == wf.call.agent_id)
        return
    now = workflow.now().timestamp()
    if ev.kind == "agent_left":
        if wf.call.status != "live" or wf.call.hangup_seen or ev.identity != wf.call.agent_id:
            return  # not live yet, hanging up anyway, or not the agent serving the call now
        wf.record_rejected(
            ev.event_id,
            f"note: agent {ev.identity} left the room ({ev.reason or 'unknown'}) "
            "without hanging up: replacing it now",
        )
        wf.liveness.overdue_now(now)  # the main loop runs agent_lost()
        wf.wake = True
    elif ev.kind == "caller_left":
        if wf.ringing or transferring(wf):
            return  # the dial's or the transfer's outcome says how the call ends
        wf.step(HangUp(reason="user_hangup", at=ev.at or now))
    elif ev.kind == "room_finished":
        wf.step(HangUp(reason="user_hangup", at=ev.at or now))
