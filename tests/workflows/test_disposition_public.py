"""Only dispositions the flow declares reach the RingflowDisposition search attribute (and
the metrics label, set from the same value); an LLM-extracted one that is anything else is
shown as ``other``. Extraction is the scripted OpenAI-compatible endpoint over HTTP; the
workflow runs on the Temporal dev server."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import Client

from ringflow.activities.search_attributes import RINGFLOW_DISPOSITION
from ringflow.callflow.dispositions import OTHER, declared_dispositions, public_disposition
from ringflow.callflow.loader import validate_data
from ringflow.callflow.model import FlowDefinition
from ringflow.simulation.scripted_llm import ScriptedLLM
from tests.support.wfkit import Agent, running_worker, start, wait_state

SESSION = pytest.mark.asyncio(loop_scope="session")  # the endpoint and the worker share the loop

PII = "Dana Smith +1-555-0100 card 4111111111111111"


@pytest.fixture
def llm(llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch) -> ScriptedLLM:
    """The test's own endpoint, as the extraction activity's LLM."""
    monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("RINGFLOW_LLM_MODEL", "scripted-extractor")
    return llm


def outcome_flow(enum: list[str] | None) -> FlowDefinition:
    field: dict[str, Any] = {"name": "disposition", "description": "How the call went."}
    if enum:
        field["enum"] = enum
    report = validate_data(
        {
            "flow": "survey",
            "nodes": {
                "ask": {
                    "task": "Ask.",
                    "extract": [field],
                    "functions": [
                        {
                            "name": "done",
                            "transition_only": True,
                            "description": "Done.",
                            "transition_to": "bye",
                        }
                    ],
                },
                "bye": {"type": "end", "task": "Bye.", "disposition": "surveyed"},
            },
        }
    )
    assert report.definition is not None, report.errors
    return report.definition


async def run_call(
    client: Client,
    task_queue: str,
    sqlite_url: str,
    llm: ScriptedLLM,
    definition: FlowDefinition,
    extracted: str,
) -> tuple[str, str | None]:
    llm.lane().set_extract("ask", {"disposition": extracted})
    async with running_worker(client, task_queue, sqlite_url):
        call = await start(client, task_queue, definition, variables={})
        agent = Agent(call)
        await agent.say(("assistant", "How was it?"), ("user", "Fine, call me back."))
        await agent.transition("ask", "done")
        await wait_state(call, lambda s: s.node == "bye", what="end node")
        await call.hangup()
        record = await call.handle.result()
        desc = await call.handle.describe()
    assert record.disposition is not None
    return record.disposition, desc.typed_search_attributes.get(RINGFLOW_DISPOSITION)


@SESSION
async def test_an_undeclared_extracted_disposition_is_other_in_search_attributes(
    llm: ScriptedLLM, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    recorded, shown = await run_call(temporal_client, task_queue, sqlite_url, llm, outcome_flow(None), PII)
    assert recorded == PII  # the operator's own record keeps what was extracted
    assert shown == OTHER


@SESSION
async def test_a_declared_disposition_is_shown_as_is(
    llm: ScriptedLLM, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    flow = outcome_flow(["callback", "not_interested"])
    recorded, shown = await run_call(temporal_client, task_queue, sqlite_url, llm, flow, "callback")
    assert recorded == shown == "callback"


def test_what_a_flow_declares() -> None:
    flow = outcome_flow(["callback"]).flow
    declared = declared_dispositions(flow)
    assert {"surveyed", "callback", "user_hangup", "completed"} <= declared
    assert public_disposition("surveyed", declared) == "surveyed"
    assert public_disposition("user_hangup", declared) == "user_hangup"
    assert public_disposition(PII, declared) == OTHER
    assert public_disposition(None, declared) == ""
