"""What the agent reports about the line (a ``CallEvent``): the caller idle or speaking, the
keys they pressed, an interruption that cancels a function, a machine answering, notes.

Applied by ``CallWorkflow`` in the agent's order (``workflows/inbox.py``), each as the
agent's own engine applied it. Deterministic workflow code, like ``room_events.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Protocol

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from ringflow.callflow.effects import Rejected
    from ringflow.callflow.engine import Step
    from ringflow.callflow.events import DtmfEntered, MachineAnswered, UserIdle, UserSpoke
    from ringflow.contract.events import CallEvent, Turn
    from ringflow.contract.records import AmdVerdict, amd_result
    from ringflow.workflows.call_progress import CallProgress, FunctionCalls, Transcript


class LineDriver(Protocol):
    """What a line event uses of the call's driver (``workflows/call_driver.CallDriver``,
    which applies line events: a Protocol, so the import runs one way)."""

    call: CallProgress
    transcript: Transcript
    functions: FunctionCalls

    def step(self, event: Any) -> Step: ...
    def record_rejected(self, event_id: str | None, reason: str) -> None: ...


def apply_line_event(wf: LineDriver, ev: CallEvent) -> None:
    at, event_id, data = ev.at, ev.event_id, ev.data
    if ev.kind == "user_idle":
        empty = data.get("kind")
        # an unknown kind raises ValidationError: recorded as rejected by apply_ready
        wf.step(UserIdle(at=at) if empty is None else UserIdle(at=at, kind=empty))
    elif ev.kind == "user_spoke":
        wf.step(UserSpoke(at=at))
    elif ev.kind == "agent_detached":
        wf.record_rejected(event_id, "note: agent detached")
    elif ev.kind == "dtmf":
        keys_pressed(wf, data, at, event_id)
    elif ev.kind == "interruption":
        interrupted(wf, event_id, data.get("cancel"))
    elif ev.kind == "answering_machine":
        machine_answered(wf, data, at, event_id)
    elif ev.kind == "amd":
        wf.call.amd = verdict(data, at)
    elif ev.kind == "note" and data.get("dropped"):
        # the agent's outbox could never send this event (see agents/signals.py)
        wf.record_rejected(event_id, f"dropped by the agent: {str(data.get('reason'))[:300]}")


def keys_pressed(wf: LineDriver, data: dict[str, Any], at: float | None, event_id: str | None) -> None:
    """The caller's keys, collected by the agent: a transcript turn, then the engine
    (a node with ``dtmf`` routes on them). Malformed keys raise ValidationError: rejected."""
    event = DtmfEntered(digits=str(data.get("digits", "")), node=data.get("node"), at=at)
    wf.transcript.add(
        Turn(
            role="user",
            text=f"[keys {event.digits}]",
            node=wf.call.flow_state.node,
            started_at=at,
            ended_at=at,
        ),
        weigh=False,
    )
    for eff in wf.step(event).effects:
        if isinstance(eff, Rejected):
            wf.record_rejected(event_id, eff.reason)


def interrupted(wf: LineDriver, event_id: str | None, target: Any) -> None:
    """The caller started talking while the LLM's call ``target`` (an event id) of a
    function marked ``cancel_on_interruption`` ran: cancel its activity. The run's
    result is then an error the LLM is told, and the log says what was cancelled. A
    cancel that arrives before the update it names is remembered (see ``run_tool``)."""
    if not isinstance(target, str) or not target:
        wf.record_rejected(event_id, "an interruption event names no function call to cancel")
        return
    handle = wf.functions.handles.get(target)
    if handle is None:
        wf.functions.ask_cancel(target)
        return
    if not handle.done():
        handle.cancel()
        wf.record_rejected(event_id, f"note: function call {target} cancelled: the caller interrupted")


def machine_answered(wf: LineDriver, data: dict[str, Any], at: float | None, event_id: str | None) -> None:
    """The agent's answering-machine detection: recorded, then the flow's voicemail node
    (or the end, ``voicemail``), the same engine step the agent took."""
    event = MachineAnswered(category=str(data.get("category", "machine-vm"))[:40], at=at)
    if wf.call.amd is None or wf.call.amd.result != "machine":  # the agent's verdict event came first
        wf.call.amd = verdict({**data, "category": event.category}, at)
    wf.transcript.add(
        Turn(role="system", text=f"answering machine detected ({event.category})", node=None, started_at=at),
        weigh=False,
    )
    for eff in wf.step(event).effects:
        if isinstance(eff, Rejected):
            wf.record_rejected(event_id, eff.reason)


def verdict(data: dict[str, Any], at: float | None) -> AmdVerdict:
    """The detection's verdict as the record keeps it; a malformed one raises
    ValidationError, which ``apply_ready`` records as rejected."""
    category = str(data.get("category") or "uncertain")[:40]
    reason = data.get("reason")
    return AmdVerdict(
        result=amd_result(category),
        category=category,
        reason=str(reason)[:500] if reason is not None else None,
        speech_s=data.get("speech_s"),
        delay_s=data.get("delay_s"),
        at=workflow.now() if at is None else datetime.fromtimestamp(at, UTC),
    )
