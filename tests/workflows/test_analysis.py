"""Post-call analysis end to end: a real CallWorkflow runs ``analyze_call`` after the call
on the whole transcript, with the extraction LLM (the scripted OpenAI-compatible endpoint:
LLMs are faked at their network boundary), and its results land in the record, the
database, a ``call.analyzed`` webhook after ``call.ended``, and the ``RingflowSuccess``
search attribute; with ``redact``, what leaves the call carries no personal data."""

from __future__ import annotations

import json
from typing import Any

import pytest
from temporalio.client import Client

from ringflow.activities.persistence import load_call, load_transcript
from ringflow.activities.search_attributes import RINGFLOW_SUCCESS
from ringflow.callflow.model import AnalysisSettings, AnalysisSuccess, ExtractSpec, FlowDefinition
from ringflow.simulation.scripted_llm import ScriptedLLM
from tests.support.loopback import Receiver
from tests.support.wfkit import Agent, clinic, running_worker, start, wait_state

PHONE = "+1 415 555 0123"


@pytest.fixture
def llm(llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch) -> ScriptedLLM:
    monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    return llm


def analysed(**kw: Any) -> FlowDefinition:
    base = clinic()
    settings = AnalysisSettings(
        summary=True,
        success=AnalysisSuccess(rubric="The patient confirmed who they are."),
        sentiment=True,
        fields=[
            ExtractSpec(name="callback_requested", type="boolean", description="They asked for a call back.")
        ],
        **kw,
    )
    return base.model_copy(update={"flow": base.flow.model_copy(update={"analysis": settings})})


async def test_the_analysis_lands_in_the_record_the_database_the_webhook_and_visibility(
    llm: ScriptedLLM, receiver: Receiver, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url, webhook_url=receiver.url):
        call = await start(temporal_client, task_queue, analysed(redact=True))
        llm.lane(call.call_id).set_extract(
            "call_analysis",
            {
                "summary": "Alex confirmed and asked for a call back.",
                "success": {"pass": False, "score": 0.4, "reason": "No slot was booked."},
                "sentiment": "neutral",
                "fields": {"callback_requested": True},
            },
        )
        snap = await call.attach("agent-1")
        agent = Agent(call, epoch=snap.epoch, seq=snap.next_seq - 1)
        await agent.say(
            ("assistant", "Hello, is this Alex?"),  # the call's patient variable: Alex Doe
            ("user", f"Yes. Call me back on {PHONE}."),
            ("user", "Or ask for Jordan Reyes, my carer."),  # a name given in the call
        )
        await wait_state(call, lambda s: s.turns == 3)
        await call.hangup("user_hangup")
        record = await call.handle.result()
        await receiver.wait_for(2)
        desc = await call.handle.describe()
    analysis = record.analysis
    assert analysis is not None and analysis.error is None
    assert analysis.summary == "Alex confirmed and asked for a call back."
    assert analysis.success is not None and not analysis.success.passed and analysis.success.score == 0.4
    assert analysis.sentiment == "neutral" and analysis.fields == {"callback_requested": True}
    stored = load_call(call.call_id, database_url=sqlite_url)
    assert stored is not None and stored.analysis == analysis
    assert desc.typed_search_attributes.get(RINGFLOW_SUCCESS) is False

    events = [(h.get("X-Ringflow-Event"), json.loads(body)) for h, body in receiver.deliveries]
    assert [e for e, _ in events] == ["call.ended", "call.analyzed"]
    assert events[0][1]["analysis"] is None
    sent = events[1][1]
    assert sent["analysis"]["success"] == {"pass": False, "score": 0.4, "reason": "No slot was booked."}
    # redact: the webhook and the LLM get the transcript without the phone number and the
    # names (the patient's, from the call's variables, and one given in the call); the
    # record kept in the database has them as they were said
    for _, body in events:
        texts = [t["text"] for t in body["transcript"]]
        assert "Yes. Call me back on <PHONE_NUMBER>." in texts and not any(PHONE in t for t in texts)
        assert "Hello, is this <PERSON>?" in texts and "Or ask for <PERSON>, my carer." in texts
        assert not any(n in t for t in texts for n in ("Alex", "Jordan", "Reyes"))
    (asked,) = [r for r in llm.lane(call.call_id).requests if r.schema_name == "call_analysis"]
    prompt = json.dumps(asked.messages)
    assert "<PHONE_NUMBER>" in prompt and PHONE not in prompt
    assert "<PERSON>" in prompt and "Alex" not in prompt and "Jordan Reyes" not in prompt
    assert "The patient confirmed who they are." in prompt
    assert asked.body["max_tokens"] <= 1500
    kept = [t.text for t in load_transcript(call.call_id, database_url=sqlite_url)] or [
        t["text"] for t in stored.transcript
    ]
    assert f"Yes. Call me back on {PHONE}." in kept and "Or ask for Jordan Reyes, my carer." in kept


async def test_an_analysis_that_keeps_failing_is_recorded_and_the_call_still_ends(
    llm: ScriptedLLM, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue, analysed())
        llm.lane(call.call_id).bad_json_next(10)
        await call.heartbeat("agent-1")
        await wait_state(call, lambda s: s.status == "live")
        await call.hangup("user_hangup")
        record = await call.handle.result()
    assert record.end_reason == "user_hangup"
    assert record.analysis is not None and "bad answer" in (record.analysis.error or "")
    assert record.analysis.success is None
