"""What ops see of a running call: search attributes, current details, metrics.

Search attributes are upserted only when a value changed, because each upsert is a
history event and a turn must stay cheap. No phone numbers or other personal data
go here: only flow, node, status, outcome and campaign.

The node and the transition count change on every transition, and an upsert for each was
a sixth of a live call's history and a visibility write on the server (issue 13): they
trail the call by at most ``visibility_refresh_s`` (a minute), carried by a workflow task
that runs anyway. Status, end reason and disposition (what ops filter on to find a call
that ended or broke) go at once, and take the node with them. The current details
(``set_current_details``, no history event) and ``ringflow call show`` are always live.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey

with workflow.unsafe.imports_passed_through():
    from ringflow.activities.search_attributes import (
        RINGFLOW_CAMPAIGN,
        RINGFLOW_DIRECTION,
        RINGFLOW_DISPOSITION,
        RINGFLOW_END_REASON,
        RINGFLOW_FLOW,
        RINGFLOW_NODE,
        RINGFLOW_STATUS,
        RINGFLOW_SUCCESS,
        RINGFLOW_TRANSITIONS,
    )
    from ringflow.callflow.dispositions import declared_dispositions, public_disposition
    from ringflow.callflow.state import CallState
    from ringflow.contract.call import CallInput

TRAILING = frozenset({"node", "transitions"})  # may trail the call (see above)


class Visibility:
    def __init__(self, inp: CallInput) -> None:
        self.inp = inp
        self.last: dict[str, Any] = {}
        self.upserted_at = 0.0  # workflow time of the last upsert
        self.declared = declared_dispositions(inp.definition.flow)
        meter = workflow.metric_meter()
        self.transitions = meter.create_counter("ringflow_transitions", "Node transitions applied.")
        self.ended = meter.create_counter("ringflow_calls_ended", "Calls ended, by reason.")
        self.recordings_failed = meter.create_counter(
            "ringflow_recordings_failed", "Recordings that could not start or stop (the call went on)."
        )
        self.lag = meter.create_histogram_float(
            "ringflow_signal_lag_seconds", "Agent event time to applied in the workflow.", "seconds"
        )
        if inp.carry is None:
            meter.create_counter("ringflow_calls_started", "Calls started.").add(
                1, {"flow": inp.definition.flow.flow}
            )

    def sync(self, state: CallState, status: str) -> None:
        want: dict[str, Any] = {
            "status": status,
            "node": state.node or "",
            "flow": self.inp.definition.flow.flow,
            "direction": self.inp.direction,
            "transitions": state.transitions,
        }
        if self.inp.campaign_id:
            want["campaign"] = self.inp.campaign_id
        if state.ended:
            want["end_reason"] = state.end_reason or ""
            if status == "ended":
                want["disposition"] = self.disposition(state.disposition or state.end_reason)
        keys: dict[str, SearchAttributeKey[Any]] = {
            "status": RINGFLOW_STATUS,
            "node": RINGFLOW_NODE,
            "flow": RINGFLOW_FLOW,
            "direction": RINGFLOW_DIRECTION,
            "transitions": RINGFLOW_TRANSITIONS,
            "campaign": RINGFLOW_CAMPAIGN,
            "end_reason": RINGFLOW_END_REASON,
            "disposition": RINGFLOW_DISPOSITION,
        }
        changed = [k for k, v in want.items() if self.last.get(k) != v]
        if not changed:
            return
        details = f"**{status}** · node `{state.node}` · {state.transitions} transitions" + (
            f" · ended: {state.end_reason}" if state.ended else ""
        )
        workflow.set_current_details(details)
        now = workflow.now().timestamp()
        if self.trails(changed, now):
            return
        workflow.upsert_search_attributes([keys[k].value_set(want[k]) for k in changed])
        self.last.update(want)
        self.upserted_at = now

    def trails(self, changed: list[str], now: float) -> bool:
        """Whether this upsert may wait: only trailing keys changed, since the last upsert
        less than ``visibility_refresh_s`` ago."""
        return (
            bool(self.last)
            and TRAILING.issuperset(changed)
            and now - self.upserted_at < self.inp.visibility_refresh_s
        )

    def success(self, passed: bool) -> None:
        """The post-call analysis's verdict, for ops to find failed calls (``RingflowSuccess = false``)."""
        workflow.upsert_search_attributes([RINGFLOW_SUCCESS.value_set(passed)])

    def count_recording_failed(self) -> None:
        self.recordings_failed.add(1, {"flow": self.inp.definition.flow.flow})

    def count_transition(self) -> None:
        self.transitions.add(1, {"flow": self.inp.definition.flow.flow})

    def count_end(self, state: CallState) -> None:
        self.ended.add(
            1,
            {
                "flow": self.inp.definition.flow.flow,
                "end_reason": state.end_reason or "",
                "disposition": self.disposition(state.disposition),
            },
        )

    def disposition(self, value: str | None) -> str:
        """What may be shown of a disposition (see ``callflow.dispositions``)."""
        return public_disposition(value, self.declared)

    def observe_lag(self, at: float | None) -> None:
        if at is not None:
            lag = workflow.now().timestamp() - at
            if lag >= 0:
                self.lag.record(lag)
