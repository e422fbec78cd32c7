"""Outbound dialing, as ``CallWorkflow`` orders it for a call started with ``dial``.

Room and agent first, then the dial (``activities/telephony.py`` says why in that order and
how a retried dial never rings twice). While the phone rings the call stays ``dialing``:
an agent that attaches meanwhile does not make it ``live``, and the agent timeout does not
run. The answer makes the call ``live``; any other outcome ends it with that end reason
(``no_answer``, ``busy``, ``dial_failed``) and closes the room, so a waiting agent leaves.
The dial's outcome and SIP status are the record's ``sip`` field (and, for a reader of the
transcript, a ``system`` turn).

Deterministic workflow code, run as a task of the workflow (not inline in ``run``), so the
workflow keeps taking signals, queries and hang-ups while the phone rings.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from ringflow.activities.telephony import TelephonyActivities
    from ringflow.callflow.events import HangUp
    from ringflow.contract.dial import (
        DEFAULT_RINGING_TIMEOUT_S,
        DialRequest,
        DialResult,
        PrepareRequest,
        PrepareResult,
        sip_identity,
    )
    from ringflow.contract.events import Turn
    from ringflow.contract.records import SipOutcome

if TYPE_CHECKING:
    from ringflow.workflows.call_driver import CallDriver

_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10), maximum_attempts=5
)


def _cause(exc: BaseException) -> str:
    return str(getattr(exc, "cause", None) or exc)[:300]


async def place_call(wf: CallDriver) -> None:
    inp = wf.inp
    assert inp.dial is not None
    room = wf.room
    wf.ringing = True
    try:
        try:
            prep = await workflow.execute_activity_method(
                TelephonyActivities.prepare_call,
                PrepareRequest(call_id=inp.call_id, room=room),
                start_to_close_timeout=timedelta(seconds=20),
                retry_policy=_RETRY,
            )
        except Exception as exc:  # ActivityError after retries: the call cannot be placed
            prep = PrepareResult(ok=False, detail=f"preparing the call failed: {_cause(exc)}")
        if not prep.ok:
            result = DialResult(outcome="dial_failed", detail=prep.detail)
        elif wf.call.flow_state.ended:  # hung up (or timed out) before the phone rang
            result = None
        else:
            ring_s = inp.dial.ringing_timeout_s or DEFAULT_RINGING_TIMEOUT_S
            try:
                result = await workflow.execute_activity_method(
                    TelephonyActivities.dial_call,
                    DialRequest(
                        call_id=inp.call_id, room=room, dial=inp.dial, identity=sip_identity(inp.call_id)
                    ),
                    start_to_close_timeout=timedelta(seconds=ring_s + 30),
                    retry_policy=_RETRY,
                )
            except Exception as exc:
                result = DialResult(outcome="dial_failed", detail=f"dialing failed: {_cause(exc)}")
    finally:
        wf.ringing = False
    if result is not None:
        record(wf, result)
    now = workflow.now().timestamp()
    if result is not None and result.outcome == "answered" and not wf.call.flow_state.ended:
        wf.call.status = "live"
        wf.liveness.seen(now)  # the agent timeout starts with the conversation
        wf.wake = True
        return
    if not wf.call.flow_state.ended and result is not None:
        wf.step(HangUp(reason=result.outcome, at=now))
    await hang_up(room)


def record(wf: CallDriver, result: DialResult) -> None:
    wf.call.sip = SipOutcome(
        outcome=result.outcome,
        code=result.sip_code,
        status=(result.sip_status or None) and result.sip_status[:200],
        detail=result.detail[:1000],
        followed=result.followed,
        at=workflow.now(),
    )
    text = f"dial: {result.outcome}"
    if result.sip_code:
        text += f" (SIP {result.sip_code} {result.sip_status or ''}".rstrip() + ")"
    if result.outcome not in ("answered",) and result.detail:
        text += f": {result.detail}"
    if result.followed:
        text += " [followed an earlier attempt's dial]"
    # no node: a note about the line, not part of any node's conversation (nor its extraction)
    wf.transcript.add(
        Turn(role="system", text=text[:1000], node=None, started_at=workflow.now().timestamp()), weigh=False
    )


async def hang_up(room: str) -> None:
    """Close the room (the agent waiting in it leaves); best effort, the call is over anyway."""
    try:
        await workflow.execute_activity_method(
            TelephonyActivities.hang_up_room,
            room,
            start_to_close_timeout=timedelta(seconds=15),
            retry_policy=_RETRY,
        )
    except Exception as exc:
        workflow.logger.warning("closing room '%s' failed: %s", room, _cause(exc))
