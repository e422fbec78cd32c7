"""Extraction: the activity against the scripted endpoint, then through CallWorkflow on a
real Temporal dev server.

The extraction LLM is the scripted endpoint reached over HTTP by the real ``openai``
client, configured the way production configures it (``OPENAI_BASE_URL`` and friends in
the worker's environment, read into its settings; the worker runs in this process).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError

from ringflow.activities.extraction import ExtractionInput, Extractor, response_schema
from ringflow.callflow.model import ExtractSpec
from ringflow.simulation.scripted_llm import ScriptedLLM
from tests.support.wfkit import Agent, req, running_worker, start, wait_state

pytestmark = pytest.mark.asyncio(loop_scope="session")  # the endpoint and the worker share the test's loop

MODEL = "scripted-extractor"
CONFIRMED = {"confirmed_identity": True}


@pytest.fixture
def llm(llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch) -> ScriptedLLM:
    """The test's own endpoint, as the extraction activity's LLM."""
    monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("RINGFLOW_LLM_MODEL", MODEL)
    return llm


# --- the activity on its own ------------------------------------------------------------
def extractor(llm: ScriptedLLM) -> Extractor:
    return Extractor(llm.base_url, "test-key", MODEL)


def _input(node: str, fields: list[ExtractSpec], call_id: str = "c-1") -> ExtractionInput:
    return ExtractionInput(
        call_id=call_id,
        node=node,
        fields=fields,
        transcript=[
            {"role": "assistant", "text": "Where shall we deliver?"},
            {"role": "user", "text": "12 Rue Lepic, Paris. Four of us."},
        ],
    )


async def test_activity_answers_match_the_strict_schema_and_objects_come_back_parsed(
    llm: ScriptedLLM,
) -> None:
    fields = [
        ExtractSpec(name="address", type="object", description="Delivery address"),
        ExtractSpec(name="size", type="integer"),
        ExtractSpec(name="note", type="string"),
    ]
    llm.lane().set_extract("delivery", {"address": {"city": "Paris"}, "size": 4})
    out = await extractor(llm).extract_variables(_input("delivery", fields))
    assert out.values == {"address": {"city": "Paris"}, "size": 4}  # note: null, so left out
    (rec,) = llm.lane().requests
    schema = rec.body["response_format"]["json_schema"]
    assert rec.schema_name == "extract_delivery" and schema["schema"] == response_schema(fields)
    assert rec.body["model"] == MODEL and "user: 12 Rue Lepic, Paris. Four of us." in rec.text


async def test_activity_routes_by_call_id_and_names_long_nodes_within_limits(llm: ScriptedLLM) -> None:
    node = "n" * 64
    llm.lane("call-a").set_extract(node, {"ok": True})
    llm.lane().set_extract(node, {"ok": False})
    fields = [ExtractSpec(name="ok", type="boolean")]
    assert (await extractor(llm).extract_variables(_input(node, fields, call_id="call-a"))).values == {
        "ok": True
    }
    assert (await extractor(llm).extract_variables(_input(node, fields, call_id="call-b"))).values == {
        "ok": False
    }
    assert len(llm.lane().requests[0].schema_name or "") == 64


async def test_activity_raises_on_bad_answers(llm: ScriptedLLM) -> None:
    fields = [ExtractSpec(name="confirmed_identity", type="boolean")]
    llm.lane().bad_json_next(1)
    with pytest.raises(ApplicationError, match="bad answer"):
        await extractor(llm).extract_variables(_input("verify", fields))
    llm.lane().set_extract("verify", {"confirmed_identity": "yes"})
    with pytest.raises(ApplicationError, match="should be boolean"):
        await extractor(llm).extract_variables(_input("verify", fields))


# --- through the workflow ---------------------------------------------------------------
async def test_leaving_a_node_extracts_its_transcript_into_state_and_record(
    llm: ScriptedLLM, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    lane = llm.lane()
    lane.set_extract("verify", CONFIRMED)
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue)
        agent = Agent(call)
        await agent.say(("assistant", "Hello, is this Alex Doe?"), ("user", "Yes, speaking."))
        await agent.transition("verify", "confirmed")
        assert (await call.state()).extracted == {}  # the agent applies it first (agents/values.py)
        await agent.collect("verify#1")
        st = await wait_state(call, lambda s: s.extracted == CONFIRMED, what="verify extracted")
        assert st.node == "offer" and st.extraction_errors == {}
        await agent.say(("user", "Monday at nine works."))
        booked = await call.call_function(req("offer", "book", slot="Mon 9"))
        assert booked.decision == "end"
        record = await call.handle.result()
    assert record.extracted == CONFIRMED
    assert record.variables["confirmed_identity"] is True and record.variables["patient"] == "Alex Doe"
    (sent,) = lane.of_kind("schema")  # offer and booked declare nothing to extract
    assert sent.schema_name == "extract_verify" and sent.body["user"] == call.call_id
    assert sent.body["model"] == MODEL
    conversation = sent.messages[-1]["content"]
    assert conversation == "assistant: Hello, is this Alex Doe?\nuser: Yes, speaking."


async def test_transitions_never_wait_and_the_end_waits_for_pending_extractions(
    llm: ScriptedLLM, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    lane = llm.lane()
    lane.set_extract("verify", CONFIRMED)
    lane.extract_gate = asyncio.Event()  # the "model" thinks until the test says so
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue)
        agent = Agent(call)
        await agent.say(("user", "Yes, it's me."))
        await agent.transition("verify", "confirmed")
        (held,) = await lane.wait_requests(1, kind="schema")
        st = await wait_state(call, lambda s: s.node == "offer", what="transition applied")
        assert st.extracted == {} and not held.answered  # applied while extraction is in flight
        slots = await call.call_function(req("offer", "list_slots"))  # updates don't wait either
        assert slots.result == {"slots": ["Mon 9"]}
        await agent.transition("offer", "wants_human")  # ends the call at handoff
        st = await wait_state(call, lambda s: s.end_reason == "completed", what="call ended")
        assert st.path == ["verify", "offer", "handoff"]
        assert st.status != "ended" and not held.answered  # finishing waits for the extraction
        desc = await call.handle.describe()
        assert desc.status == WorkflowExecutionStatus.RUNNING
        lane.extract_gate.set()
        record = await call.handle.result()
    assert record.extracted == CONFIRMED and record.variables["confirmed_identity"] is True
    assert record.disposition == "callback" and len(lane.of_kind("schema")) == 1


async def test_a_call_ending_on_a_node_extracts_that_node(
    llm: ScriptedLLM, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    lane = llm.lane()
    lane.set_extract("verify", {"confirmed_identity": False})
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue)
        agent = Agent(call)
        await agent.say(("assistant", "Hello, is this Alex Doe?"), ("user", "Who is asking?"))
        await wait_state(call, lambda s: s.turns == 2, what="turns recorded")
        await call.hangup()
        record = await call.handle.result()
    assert record.end_reason == "user_hangup" and record.path == ["verify"]
    assert record.extracted == {"confirmed_identity": False}
    (sent,) = lane.of_kind("schema")
    assert "user: Who is asking?" in sent.messages[-1]["content"]


async def test_bad_answers_are_retried_then_recorded_without_hurting_the_call(
    llm: ScriptedLLM, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    lane = llm.lane()
    lane.bad_json_next(1)  # attempt 1: not JSON; attempts 2 and 3: a string for a boolean
    lane.set_extract("verify", {"confirmed_identity": "yes"})
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue)
        agent = Agent(call)
        await agent.say(("user", "Yes."))
        await agent.transition("verify", "confirmed")
        st = await wait_state(
            call, lambda s: "verify" in s.extraction_errors, timeout=30, what="extraction error recorded"
        )
        assert "should be boolean" in st.extraction_errors["verify"]
        assert st.extracted == {} and st.node == "offer" and st.status == "live"
        assert [r.note for r in lane.of_kind("schema")] == ["bad json", None, None]
        slots = await call.call_function(req("offer", "list_slots"))
        assert not slots.error
        await call.hangup()
        record = await call.handle.result()
    assert record.end_reason == "user_hangup" and record.extracted == {}
    assert "confirmed_identity" not in record.variables


async def test_a_failed_attempt_is_retried_and_the_value_lands(
    llm: ScriptedLLM, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    lane = llm.lane()
    lane.fail_next(1, status=503)
    lane.set_extract("verify", CONFIRMED)
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue)
        agent = Agent(call)
        await agent.say(("user", "Speaking."))
        await agent.transition("verify", "confirmed")
        # While the call runs, the agent applies an extraction's result (the values channel);
        # this stand-in agent does not, so the values land when the call ends. What is tested
        # here is the retry: the second attempt's answer is the one the record keeps.
        await wait_state(call, lambda s: len(lane.of_kind("schema")) == 2, what="the extraction asked twice")
        await call.hangup()
        record = await call.handle.result()
    assert [r.status for r in lane.of_kind("schema")] == [503, 200]
    assert record.extracted == CONFIRMED


async def test_a_node_where_nothing_was_said_is_not_sent_to_the_llm(
    llm: ScriptedLLM, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    llm.lane().set_extract("verify", CONFIRMED)
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue)
        agent = Agent(call)
        await agent.transition("verify", "confirmed")
        await wait_state(call, lambda s: s.node == "offer", what="transition applied")
        await call.hangup()
        record = await call.handle.result()
    assert record.extracted == {} and llm.requests == []  # the record waited for any extraction


async def test_extractions_share_one_client(llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    """Building an OpenAI client (its TLS context) holds the worker's event loop, 0.4-1 s on a
    loaded machine; one per extraction stalled every activity, workflow task and (in the
    simulator) agent of the worker that long, and a healthy simulated agent was taken for
    lost (issue 23 §2). The activity builds its client once."""
    import openai

    built: list[object] = []
    real = openai.AsyncOpenAI

    def counting(*args: Any, **kwargs: Any) -> Any:
        built.append(kwargs.get("base_url"))
        return real(*args, **kwargs)

    monkeypatch.setattr(openai, "AsyncOpenAI", counting)
    fields = [ExtractSpec(name="ok", type="boolean")]
    llm.lane().set_extract("verify", {"ok": True})
    ex = extractor(llm)
    for _ in range(3):
        assert (await ex.extract_variables(_input("verify", fields))).values == {"ok": True}
    assert built == [llm.base_url]
