"""``knowledge`` entries in the engine and the validator (callflow/knowledge.py): the LLM is
offered one ``query`` argument, a call runs the search like any workflow-side function
(the same step in the agent's engine and the workflow's), and ``flow validate`` names each
misuse where it is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ringflow.callflow.effects import RunFunction, ToolResponse
from ringflow.callflow.engine import Engine
from ringflow.callflow.events import CallStarted, FunctionCalled, FunctionResult
from ringflow.callflow.loader import validate_data

FLOW: dict[str, Any] = {
    "flow": "kb_flow",
    "knowledge": [{"file": "faq.md"}],
    "nodes": {
        "answer": {
            "task": "Answer.",
            "functions": [
                {"name": "search", "knowledge": {"top_k": 2}},
                {"name": "done", "description": "Done.", "transition_only": True, "transition_to": "bye"},
            ],
        },
        "bye": {"type": "end", "task": "Bye."},
    },
}


def definition(tmp_path: Path, data: dict[str, Any]) -> Any:
    (tmp_path / "faq.md").write_text("# Hours\nOpen eight to six.\n")
    report = validate_data(data, base_dir=tmp_path, source="flow.yaml")
    return report


def test_the_search_is_a_tool_with_one_query_and_runs_in_the_workflow(tmp_path: Path) -> None:
    report = definition(tmp_path, FLOW)
    assert report.definition is not None, report.errors
    engine = Engine(report.definition)
    step = engine.start(CallStarted(call_id="c1", at=1.0))
    tools = {t.name: t for e in step.effects if hasattr(e, "tools") for t in e.tools}
    assert tools["search"].parameters["required"] == ["query"]
    assert "knowledge base" in tools["search"].description
    called = engine.apply(
        step.state, FunctionCalled(name="search", args={"query": "hours?"}, node="answer", at=2.0)
    )
    (run,) = [e for e in called.effects if isinstance(e, RunFunction)]
    assert run.kind == "knowledge" and run.knowledge is not None and run.knowledge.top_k == 2
    refused = engine.apply(step.state, FunctionCalled(name="search", args={}, node="answer", at=2.0))
    assert any(isinstance(e, ToolResponse) and e.error for e in refused.effects)
    passages = {"status": "ok", "passages": [{"source": "faq.md", "chunk": 0, "text": "Open eight to six."}]}
    done = engine.apply(called.state, FunctionResult(run_id=run.run_id, result=passages, at=3.0))
    (answer,) = [e for e in done.effects if isinstance(e, ToolResponse)]
    assert answer.result == passages and answer.run_llm and not done.state.pending


def test_validation_names_each_misuse(tmp_path: Path) -> None:
    bad = {
        **FLOW,
        "knowledge": [{"file": "faq.md"}, {"file": "missing.md"}, {"url": "ftp://x/y"}, {"file": "a.docx"}],
        "nodes": {
            "answer": {
                "task": "Answer.",
                "functions": [
                    {"name": "search", "knowledge": True, "parameters": {"type": "object"}},
                ],
            },
            "act": {"type": "action", "run": {"name": "lookup", "knowledge": True}, "transition_to": "bye"},
            "bye": {"type": "end", "task": "Bye."},
        },
    }
    report = definition(tmp_path, bad)
    errors = {e.path: e.message for e in report.errors}
    assert "does not exist" in errors["knowledge[1].file"]
    assert "http(s)" in errors["knowledge[2].url"]
    assert "no type from its extension" in errors["knowledge[3].type"]
    assert "given by Ringflow" in errors["nodes.answer.functions[0].parameters"]
    assert "action node runs a handler" in errors["nodes.act.run"]
    alone = definition(tmp_path, {**FLOW, "knowledge": []})
    assert any("list them under 'knowledge:'" in e.message for e in alone.errors)
