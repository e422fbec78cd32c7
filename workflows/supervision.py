"""Supervisors on a live call, in ``CallWorkflow``: the ``supervise`` update's rules and what
it records, the agent's ``supervisor`` event applied to the engine, the paused time limit.

A whisper, a takeover or a hand-back is taken here first, numbered and kept in the call's
progress (``Supervision``, carried across continue-as-new): that is the durable event. A
takeover shows at once (``RingflowStatus = takeover``) and pauses the call's time limit.
The call's agent polls the ``supervision`` query, applies each action to its engine at a
point of its own events and reports it there (a ``supervisor`` event with the action's
number); the workflow's engine applies the same action, as the workflow recorded it, at
that point of the agent's events, so the two engines hold equal state. An agent that dies
during a takeover is replaced as any lost agent is; its successor reads the supervision and
stays paused. Deterministic workflow code.
"""

from __future__ import annotations

from typing import Protocol

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from ringflow.callflow.effects import Rejected
    from ringflow.callflow.engine import Engine, Step
    from ringflow.callflow.events import SupervisorAction
    from ringflow.contract.call import CallInput
    from ringflow.contract.events import CallEvent, Turn
    from ringflow.contract.supervision import (
        KEPT_ACTIONS,
        Supervision,
        SupervisorAnswer,
        SupervisorRequest,
        SupervisorStep,
    )
    from ringflow.workflows.call_progress import CallProgress, Transcript

RESUMABLE = ("agent", "end")  # node types a call may be handed back at (an LLM runs there)


class SupervisedDriver(Protocol):
    """What supervision uses of the call's driver (``workflows/call_driver.CallDriver``)."""

    inp: CallInput
    engine: Engine
    call: CallProgress
    transcript: Transcript
    wake: bool

    def step(self, event: object) -> Step: ...
    def record_rejected(self, event_id: str | None, reason: str) -> None: ...


def refusal(d: SupervisedDriver, req: SupervisorRequest) -> str | None:
    """Why the call cannot take ``req`` now, for the supervisor (None: it can). The same rule
    for the update's validator (nothing recorded) and its handler."""
    call, sup = d.call, d.call.supervision
    if call.flow_state.ended or call.status == "ended":
        return f"the call has ended ({call.flow_state.end_reason or 'ended'})"
    if call.status != "live" and not sup.takeover:
        return f"the call is not live yet (it is {call.status}): no agent has it"
    if req.action != "whisper" and req.text is not None:
        return "'text' is a whisper's hint; a takeover or a hand-back takes none"
    if req.action != "handback" and req.node is not None:
        return "'node' is where a hand-back resumes; only a hand-back takes one"
    if req.action == "whisper":
        if req.text is None or not req.text.strip():
            return "a whisper needs the hint's text"
        if sup.takeover:
            return "a supervisor has the call: the bot is paused, hand it back before whispering"
    elif req.action == "takeover":
        if sup.takeover:
            return f"the call is taken over already (by {_by(sup)})"
    else:
        if not sup.takeover:
            return "the call is not taken over: there is nothing to hand back"
        if req.node is not None:
            nodes = d.engine.flow.nodes
            if req.node not in nodes:
                known = ", ".join(n for n, c in nodes.items() if c.node.type in RESUMABLE)
                return f"the flow has no node '{req.node}'; hand back at one of: {known}"
            kind = nodes[req.node].node.type
            if kind not in RESUMABLE:
                return f"node '{req.node}' is a {kind} node: hand the call back at an agent or end node"
    return None


def _by(sup: Supervision) -> str:
    took = next((a for a in reversed(sup.actions) if a.action == "takeover"), None)
    return (took.by if took is not None else None) or "a supervisor"


def take(d: SupervisedDriver, req: SupervisorRequest) -> SupervisorAnswer:
    """Record ``req`` (checked by ``refusal``): numbered, kept, shown; the agent applies it."""
    now = workflow.now().timestamp()
    sup = d.call.supervision
    step = SupervisorStep(id=sup.next_id, action=req.action, text=req.text, node=req.node, by=req.by, at=now)
    takeover, since, paused = sup.takeover, sup.since, sup.paused_s
    if req.action == "takeover":
        takeover, since = True, now
    elif req.action == "handback":
        paused += max(0.0, now - (since if since is not None else now))
        takeover, since = False, None
    d.call.supervision = Supervision(
        takeover=takeover,
        since=since,
        paused_s=paused,
        next_id=sup.next_id + 1,
        actions=[*sup.actions, step][-KEPT_ACTIONS:],
    )
    d.wake = True  # the main loop shows the status and re-arms its timer
    return SupervisorAnswer(step=step, supervision=d.call.supervision)


def apply_supervisor_event(d: SupervisedDriver, ev: CallEvent) -> None:
    """The agent applied supervisor action ``data.id`` here: the engine applies it too, as
    the workflow recorded it (what the agent says of it beyond its number is not trusted)."""
    sid = ev.data.get("id")
    step = next((a for a in d.call.supervision.actions if a.id == sid), None) if type(sid) is int else None
    if step is None:
        d.record_rejected(ev.event_id, f"supervisor event for action {sid!r}, which this call did not take")
        return
    before = d.call.flow_state.node
    done = d.step(SupervisorAction(id=step.id, action=step.action, node=step.node, at=ev.at))
    for eff in done.effects:
        if isinstance(eff, Rejected):
            d.record_rejected(ev.event_id, eff.reason)
    # the call's timeline: where in the conversation the bot was paused, coached, given back
    who = step.by or "a supervisor"
    note = {
        "whisper": f"supervisor whisper by {who}",
        "takeover": f"supervisor takeover by {who}",
        "handback": f"supervisor hand-back by {who} at {d.call.flow_state.node or before}",
    }[step.action]
    d.transcript.add(Turn(role="system", text=note, node=None, started_at=ev.at, ended_at=ev.at), weigh=False)


def paused_deadline(sup: Supervision, limit: float, now: float) -> float:
    """The call's time limit (``limit``: its start plus ``max_duration_s``) with the
    supervisors' pauses: later by the takeovers that ended, and never due while one lasts
    (it moves on with the clock; re-evaluated at every wake-up of the loop)."""
    if sup.takeover and sup.since is not None:
        return max(limit + sup.paused_s + (now - sup.since), now + 1.0)
    return limit + sup.paused_s
