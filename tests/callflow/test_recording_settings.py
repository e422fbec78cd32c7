"""A flow's ``recording`` settings and ``analysis`` block: what validation refuses (with
where and why), and the consent announcement the engine says before anything of the first node."""

from __future__ import annotations

from typing import Any

import pytest

from ringflow.callflow.effects import Say, SetNode
from ringflow.callflow.events import CallStarted
from ringflow.callflow.loader import validate_data
from tests.support.engine_flows import agent, end, engine, flow, go


def recorded(**recording: Any) -> dict[str, Any]:
    return flow(
        {
            "ask": agent(go("yes", "talk"), go("no", "bye"), greeting="Hello {{name}}!"),
            "talk": agent(go("done", "bye")),
            "bye": end(),
        },
        variables={"name": {"default": "Alex"}},
        recording=recording,
    )


@pytest.mark.parametrize(
    ("recording", "path", "says"),
    [
        ({"store": "ftp://host/x"}, "recording.store", "must start with one of s3://"),
        ({"store": "s3:///calls/"}, "recording.store", "names no bucket"),
        ({"store": "file:///"}, "recording.store", "names its folder"),
        ({}, "recording.store", "a recording needs a store"),
        ({"store": "s3://b/", "record_after_consent": "tlak"}, "recording.record_after_consent", "'talk'"),
        ({"store": "s3://b/", "layout": "stereo"}, "recording.layout", "mixed"),
        ({"store": "s3://b/", "consent": {"say": "Recorded for {{nope}}."}}, "recording.consent.say", "nope"),
        ({"store": "s3://b/", "bucket": "x"}, "recording", "bucket"),
    ],
)
def test_bad_recording_settings_are_refused_saying_where_and_why(
    recording: dict[str, Any], path: str, says: str
) -> None:
    report = validate_data(recorded(**recording))
    assert not report.ok
    assert any(e.path.startswith(path) and says in str(e) for e in report.errors), report.errors


@pytest.mark.parametrize(
    "store", ["s3://bucket/calls/", "gs://bucket/", "azure://container/calls", "file:///var/recordings"]
)
def test_each_kind_of_store_is_accepted(store: str) -> None:
    report = validate_data(recorded(store=store, record_after_consent="talk"))
    assert report.ok, report.errors


def test_recording_off_needs_no_store() -> None:
    assert validate_data(recorded(enabled=False)).ok


def test_the_consent_announcement_comes_before_the_first_nodes_greeting() -> None:
    data = recorded(store="s3://b/", consent={"say": "This call is recorded, {{name}}."})
    eng = engine(data)
    step = eng.start(CallStarted(call_id="c1", variables={}, at=0.0))
    # the workflow's start step and the agent's opening (what it says on a fresh call) agree
    for effects in (step.effects, eng.opening(step.state)):
        kinds = [type(e).__name__ for e in effects]
        assert kinds[:3] == ["SetNode", "Say", "Say"]
        says = [e.text for e in effects if isinstance(e, Say)]
        assert says == ["This call is recorded, Alex.", "Hello Alex!"]
        assert isinstance(effects[0], SetNode) and effects[0].node == "ask"
    # an agent arriving later (a routed node, a resume) does not announce it again
    assert [e.text for e in eng.arrival(step.state) if isinstance(e, Say)] == ["Hello Alex!"]


def test_no_announcement_without_consent_or_with_recording_off() -> None:
    for data in (recorded(store="s3://b/"), recorded(enabled=False, consent={"say": "Recorded."})):
        step = engine(data).start(CallStarted(call_id="c1", variables={}, at=0.0))
        assert [e.text for e in step.effects if isinstance(e, Say)] == ["Hello Alex!"]


def test_analysis_fields_are_checked() -> None:
    data = recorded(enabled=False)
    field = {"name": "callback", "type": "boolean"}
    data["analysis"] = {"success": {"rubric": "Booked."}, "fields": [field, field]}
    report = validate_data(data)
    assert [(e.path, e.message) for e in report.errors] == [
        ("analysis.fields[1].name", "duplicate field name 'callback'")
    ]
    data["analysis"] = {
        "summary": True,
        "sentiment": True,
        "success": {"rubric": "Booked."},
        "fields": [field],
    }
    assert validate_data(data).ok
    data["analysis"] = {"success": {}}
    assert any(e.path.startswith("analysis.success.rubric") for e in validate_data(data).errors)
