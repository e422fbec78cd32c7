"""The call as the outside world sees it: the persisted record and the ``state`` query."""

from __future__ import annotations

from datetime import UTC, datetime

from ringflow.callflow.state import CallState
from ringflow.contract.call import CallInput, CallView, call_workflow_id
from ringflow.contract.events import Turn
from ringflow.contract.recording import RecordingInfo
from ringflow.contract.records import AmdVerdict, CallRecord, SipOutcome, TranscriptItem
from ringflow.contract.wire import MAX_ROUTE_CHARS
from ringflow.workflows.call_progress import CallProgress
from ringflow.workflows.inbox import Inbox


def _ts(t: float | None) -> datetime | None:
    return datetime.fromtimestamp(t, UTC) if t is not None else None


def disposition_of(state: CallState) -> str | None:
    """The engine's, which it keeps by the one rule of ``callflow.dispositions``; the end
    reason for a call ended before the engine could decide (it never started)."""
    return state.disposition or state.end_reason


def tags_of(state: CallState) -> list[str]:
    """Handlers may tag a call through ``flow_manager.state['tags']``; the end reason is one."""
    tags = state.state.get("tags")
    out = [str(t) for t in tags] if isinstance(tags, list) else []
    if state.end_reason and state.end_reason not in out:
        out.append(state.end_reason)
    return out


def transcript_items(turns: list[Turn], base: int) -> list[TranscriptItem]:
    return [
        TranscriptItem(
            idx=base + i,
            role=t.role,
            text=t.text,
            node=t.node,
            at=_ts(t.started_at),
            data={"ended_at": t.ended_at, "interrupted": t.interrupted},
        )
        for i, t in enumerate(turns)
    ]


def _number(value: str | None) -> str | None:
    return value[:MAX_ROUTE_CHARS] if value else None


def build_record(
    inp: CallInput,
    state: CallState,
    status: str,
    transcript: list[Turn],
    base: int,
    started_at: float,
    now: datetime,
    sip: SipOutcome | None = None,
    amd: AmdVerdict | None = None,
    recording: RecordingInfo | None = None,
) -> CallRecord:
    """``sip`` and ``amd``: what the telephony said about a dialed call (workflows/dialing.py)."""
    return CallRecord(
        call_id=inp.call_id,
        workflow_id=call_workflow_id(inp.call_id),
        flow=inp.definition.flow.flow,
        flow_version=inp.definition.flow.version,
        status=status,
        node=state.node,
        path=state.path,
        variables={**state.variables, **state.extracted},
        extracted=state.extracted,
        state=state.state,
        disposition=disposition_of(state),
        tags=tags_of(state),
        end_reason=state.end_reason,
        transcript=[i.model_dump(mode="json") for i in transcript_items(transcript, base)],
        started_at=_ts(started_at) or now,
        ended_at=now if state.ended else None,
        updated_at=now,
        direction=inp.direction,
        campaign_id=inp.campaign_id,
        room=inp.room,
        caller_number=_number(state.caller_number or inp.caller_number),
        called_number=_number(state.called_number or inp.called_number),
        sip=sip,
        amd=amd,
        recording=recording,
        refused=state.refused,
        canary=f"{inp.canary.canary_id}:{inp.canary.side}" if inp.canary is not None else None,
    )


def call_view(inp: CallInput, call: CallProgress, inbox: Inbox, turns: int) -> CallView:
    state = call.flow_state
    return CallView(
        call_id=inp.call_id,
        flow=inp.definition.flow.flow,
        flow_version=inp.definition.flow.version,
        status=call.shown_status,
        node=state.node,
        path=state.path,
        variables=state.variables,
        extracted=state.extracted,
        state=state.state,
        transitions=state.transitions,
        disposition=disposition_of(state) if state.ended else None,
        end_reason=state.end_reason,
        started_at=call.started_at,
        updated_at=state.now,
        agent_id=call.agent_id,
        next_seq=inbox.next_seq,
        waiting_for_seq=inbox.waiting_for,
        duplicates=inbox.duplicates,
        rejected=call.rejected[-20:],
        extraction_errors=call.extraction_errors,
        pending_functions=len(state.pending),
        runs=call.runs,
        turns=turns,
        room=inp.room,
        sip=call.sip,
        amd=call.amd,
        epoch=call.epoch,
        recording=call.recording,
        supervision=call.supervision,
        refused=state.refused,
    )
