"""``campaign report``'s analysis and recording columns and its figures, on a real database:
each contact's last call is joined from the calls table, by its last attempt."""

from __future__ import annotations

from datetime import UTC, datetime

from ringflow.activities import campaign_store as store
from ringflow.activities.persistence import upsert_call
from ringflow.contract.analysis import CallAnalysis, SuccessEvaluation
from ringflow.contract.recording import RecordingInfo
from ringflow.contract.records import CallRecord

NOW = datetime(2026, 1, 5, 10, tzinfo=UTC)


def call(call_id: str, cid: str, passed: bool | None, score: float | None) -> CallRecord:
    success = None if passed is None else SuccessEvaluation(passed=passed, score=score, reason="r")
    return CallRecord(
        call_id=call_id,
        workflow_id=f"call-{call_id}",
        flow="f",
        status="ended",
        disposition="booked" if passed else "callback",
        started_at=NOW,
        updated_at=NOW,
        campaign_id=cid,
        analysis=CallAnalysis(success=success, sentiment="positive" if passed else None),
        recording=RecordingInfo(
            id="EG_1", status="completed", location=f"s3://b/{call_id}.ogg", duration_s=3.5
        ),
    )


def test_the_report_carries_the_last_calls_analysis_and_recording_and_its_figures(database_url: str) -> None:
    cid = f"camp-{datetime.now().timestamp():.0f}"
    engine = store.engine_for(database_url)
    with engine.begin() as conn:
        for idx, (state, disposition) in enumerate(
            [("reached", "booked"), ("reached", "callback"), ("failed", None)]
        ):
            conn.execute(
                store.C.insert().values(
                    campaign_id=cid,
                    idx=idx,
                    phone=f"+1212555070{idx}",
                    tz="UTC",
                    variables={},
                    state=state,
                    attempts=1,
                    seq=1,
                    next_at=0.0,
                    disposition=disposition,
                    extracted={},
                    retries={},
                )
            )
        rows = [(0, 1, f"{cid}-0-1"), (0, 2, f"{cid}-0-2"), (1, 1, f"{cid}-1-1")]
        for idx, attempt, call_id in rows:
            conn.execute(
                store.A.insert().values(
                    campaign_id=cid, idx=idx, attempt=attempt, call_id=call_id, claim_key=f"k{idx}{attempt}"
                )
            )
    upsert_call(database_url, call(f"{cid}-0-1", cid, False, 0.1))  # an earlier attempt's: not reported
    upsert_call(database_url, call(f"{cid}-0-2", cid, True, 0.9))
    upsert_call(database_url, call(f"{cid}-1-1", cid, False, 0.3))
    report = store.report(database_url, cid)
    assert [(r["call_id"], r["success"], r["score"], r["sentiment"]) for r in report] == [
        (f"{cid}-0-2", True, 0.9, "positive"),
        (f"{cid}-1-1", False, 0.3, None),
        (None, None, None, None),
    ]
    assert report[0]["recording"] == f"s3://b/{cid}-0-2.ogg" and report[0]["recording_s"] == 3.5
    figures = store.aggregate(report)
    assert figures["success_rate"] == 0.5 and figures["analysed"] == 2
    assert abs(figures["average_score"] - 0.6) < 1e-9
    assert figures["dispositions"] == {"booked": 1, "callback": 1}
    assert figures["states"] == {"reached": 2, "failed": 1} and figures["recorded"] == 2
