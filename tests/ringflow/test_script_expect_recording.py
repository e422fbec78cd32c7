"""Scripts' ``expect.recording`` and ``expect.analysis``: matched like the other keys, and
``recording: null`` demands that nothing was recorded (a caller who declined)."""

from __future__ import annotations

from ringflow.simulation.scripts import Expect, check

DONE = {
    "recording": {"id": "EG_1", "status": "completed"},
    "analysis": {"success": {"pass": True, "score": 0.9}},
}


def test_recording_and_analysis_match_on_the_keys_given() -> None:
    want = Expect.model_validate(
        {"recording": {"status": "completed"}, "analysis": {"success": {"pass": True}}}
    )
    assert check(want, DONE) == []
    failing = Expect.model_validate({"analysis": {"success": {"pass": False}}})
    assert check(failing, DONE) == ["analysis.success.pass: expected False, got True"]


def test_recording_null_expects_no_recording_and_absent_expects_nothing() -> None:
    assert check(Expect.model_validate({"recording": None}), DONE) == [
        "recording: expected None, got {'id': 'EG_1', 'status': 'completed'}"
    ]
    assert check(Expect.model_validate({"recording": None}), {"recording": None}) == []
    assert check(Expect(), DONE) == []
