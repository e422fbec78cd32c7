"""``bench/_actions.py`` reads Temporal Cloud's billable actions from a history as its
published list counts them: one action for all the local activities of one workflow task,
an activity's retries each, a search-attribute upsert unless it only moves the patch
marker's ``TemporalChangeVersion``, and patch markers never (``bench/load.py`` reports
``billable_actions_per_call_minute`` from it)."""

from __future__ import annotations

import sys
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType as E
from temporalio.api.history.v1 import (
    ActivityTaskStartedEventAttributes,
    HistoryEvent,
    MarkerRecordedEventAttributes,
    UpsertWorkflowSearchAttributesEventAttributes,
)

from tests.support.paths import ROOT

sys.path.insert(0, str(ROOT / "bench"))
from _actions import ActionCounter  # type: ignore[import-not-found]


def ev(t: Any, **attrs: Any) -> HistoryEvent:
    return HistoryEvent(event_type=t, **attrs)


def marker(name: str) -> HistoryEvent:
    return ev(
        E.EVENT_TYPE_MARKER_RECORDED,
        marker_recorded_event_attributes=MarkerRecordedEventAttributes(marker_name=name),
    )


def upsert(*keys: str) -> HistoryEvent:
    attrs = UpsertWorkflowSearchAttributesEventAttributes()
    for k in keys:
        attrs.search_attributes.indexed_fields[k].CopyFrom(Payload(data=b'"x"'))
    return ev(
        E.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES,
        upsert_workflow_search_attributes_event_attributes=attrs,
    )


def test_billable_actions_are_counted_as_temporal_cloud_lists_them() -> None:
    done = ev(E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
    history = [
        ev(E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED),
        done,
        marker("core_local_activity"),
        marker("core_local_activity"),  # the same task: one action for both
        marker("core_patch"),  # a patch marker: none
        upsert("TemporalChangeVersion"),  # the patch's own attribute: exempt
        upsert("RingflowNode", "RingflowStatus"),  # one upsert, two attributes: one action
        ev(E.EVENT_TYPE_TIMER_STARTED),
        ev(E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED),
        done,
        marker("core_local_activity"),  # the next task: one more
        ev(E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED),
        ev(
            E.EVENT_TYPE_ACTIVITY_TASK_STARTED,
            activity_task_started_event_attributes=ActivityTaskStartedEventAttributes(attempt=3),
        ),  # two retries
        ev(E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED),
        ev(E.EVENT_TYPE_TIMER_CANCELED),  # not an action
    ]
    counter = ActionCounter()
    for e in history:
        counter.feed(e, inside=True)
    assert counter.by_type == {
        "workflow_started": 1,
        "local_activities": 2,
        "search_attribute_upsert": 1,
        "timer": 1,
        "signal": 1,
        "activity": 3,
        "update": 1,
    }
    assert counter.total == 10
    outside = ActionCounter()
    for e in history:
        outside.feed(e, inside=False)  # before the window: nothing counted
    assert outside.total == 0
