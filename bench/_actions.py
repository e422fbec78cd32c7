"""Temporal Cloud's billable actions, read from a workflow's history (imported by
bench/load.py; not a bench).

By Temporal Cloud's published list ("Temporal Cloud Actions" in its documentation): a
workflow started (a client start, a continue-as-new, a child's start: each run's
``workflow_execution_started``), a signal (counted where it is received), a timer started
(implicit ones too: a ``wait_condition`` with a timeout), a search-attribute upsert
(``TemporalChangeVersion``, the patch marker's, is exempt), an update the worker accepted,
an activity attempt (``activity_task_scheduled``, plus each retry: the attempt number on its
``activity_task_started``), and local activities: one action for all those one workflow task
ran (their ``core_local_activity`` markers). Patch markers are not actions. What a history
cannot show is left out and named by the bench that reports it: queries (each one an action),
rejected updates, activity heartbeats.
"""

from __future__ import annotations

from typing import Any

from temporalio.api.enums.v1 import EventType

E = EventType
ONE_EACH = {
    E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED: "workflow_started",
    E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED: "signal",
    E.EVENT_TYPE_TIMER_STARTED: "timer",
    E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED: "activity",
    E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED: "update",
}
LOCAL_ACTIVITY_MARKER = "core_local_activity"
CHANGE_VERSION = "TemporalChangeVersion"


class ActionCounter:
    """Feed it a history's events in order; ``by_type`` holds the billable actions of those
    ``inside`` the window."""

    def __init__(self) -> None:
        self.by_type: dict[str, int] = {}
        self._local_counted = False  # this workflow task's local activities: counted already

    def _add(self, kind: str, n: int = 1) -> None:
        self.by_type[kind] = self.by_type.get(kind, 0) + n

    def feed(self, ev: Any, inside: bool) -> None:
        t = ev.event_type
        if t == E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            self._local_counted = False  # a task's commands' events come after its completion
            return
        if not inside:
            return
        if (kind := ONE_EACH.get(t)) is not None:
            self._add(kind)
        elif t == E.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            retries = ev.activity_task_started_event_attributes.attempt - 1
            if retries > 0:
                self._add("activity", retries)
        elif t == E.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            fields = ev.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
            if set(fields) - {CHANGE_VERSION}:
                self._add("search_attribute_upsert")
        elif t == E.EVENT_TYPE_MARKER_RECORDED:
            if ev.marker_recorded_event_attributes.marker_name == LOCAL_ACTIVITY_MARKER:
                if not self._local_counted:
                    self._add("local_activities")
                    self._local_counted = True

    @property
    def total(self) -> int:
        return sum(self.by_type.values())
