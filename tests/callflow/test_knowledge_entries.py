"""``knowledge`` entries in the engine and the validator (callflow/knowledge.py): the LLM is
offered one ``query`` argument, a call runs the search like any workflow-side function
(the same step in the agent's engine and the workflow's), and ``flow validate`` names each
misuse where it is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ringflow.callflow.effects import RunFunction, SetNode, ToolResponse
from ringflow.callflow.engine import Engine
from ringflow.callflow.events import CallStarted, FunctionCalled, FunctionResult, UserSpoke
from ringflow.callflow.knowledge import RETRIEVAL_FUNCTION, KnowledgeSearch
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


AUTO: dict[str, Any] = {
    "flow": "kb_auto",
    "knowledge": [{"file": "faq.md"}],
    "nodes": {
        "answer": {
            "task": "Answer.",
            "knowledge": {"top_k": 2, "max_bytes": 600},
            "functions": [
                {"name": "done", "description": "Done.", "transition_only": True, "transition_to": "bye"},
            ],
        },
        "bye": {"type": "end", "task": "Bye."},
    },
}


def test_a_node_with_automatic_retrieval_runs_a_hidden_search_both_engines_agree_on(tmp_path: Path) -> None:
    """``knowledge:`` on a node: the LLM is never offered the retrieval (nor told of it when it
    calls a name the node lacks), the agent's call of it is a search with the node's bounds
    run in the workflow, and the agent, adopting the workflow's answer, holds its state."""
    report = definition(tmp_path, AUTO)
    assert report.definition is not None, report.errors
    engine = Engine(report.definition)
    step = engine.start(CallStarted(call_id="c1", at=1.0))
    offered = [t.name for e in step.effects if hasattr(e, "tools") for t in e.tools]
    assert offered == ["done"]
    unknown = engine.apply(step.state, FunctionCalled(name="nope", args={}, node="answer", at=2.0))
    (refusal,) = [e for e in unknown.effects if isinstance(e, ToolResponse)]
    assert refusal.result is not None and refusal.result["valid_functions"] == ["done"]
    # the agent: the caller's turn, then the retrieval's update; the workflow: the same turn
    # (its events come first), the same call, then the search's result
    agent = engine.apply(step.state, UserSpoke(at=2.0)).state
    workflow = engine.apply(step.state, UserSpoke(at=2.0)).state
    called = engine.apply(
        workflow, FunctionCalled(name=RETRIEVAL_FUNCTION, args={"query": "hours?"}, node="answer", at=2.1)
    )
    (run,) = [e for e in called.effects if isinstance(e, RunFunction)]
    assert run.kind == "knowledge" and run.knowledge == KnowledgeSearch(top_k=2, max_bytes=600)
    passages = {"status": "ok", "passages": [{"source": "faq.md", "chunk": 0, "text": "Open eight to six."}]}
    done = engine.apply(called.state, FunctionResult(run_id=run.run_id, result=passages, at=2.2))
    assert not done.state.pending and done.state.node == "answer"
    assert not any(isinstance(e, SetNode | RunFunction) for e in done.effects)
    agent = done.state  # the update's answer carries the workflow's state (agents/controller.py)
    assert agent.model_dump() == done.state.model_dump()
    # both engines go on from there alike: the caller's next move is the same step on each
    moved_agent = engine.apply(agent, FunctionCalled(name="done", args={}, node="answer", at=3.0))
    moved_workflow = engine.apply(done.state, FunctionCalled(name="done", args={}, node="answer", at=3.0))
    assert moved_agent.state.model_dump() == moved_workflow.state.model_dump()
    assert moved_agent.state.node == "bye"
    # ``knowledge: true``: the defaults
    flag = definition(
        tmp_path,
        {**AUTO, "nodes": {**AUTO["nodes"], "answer": {**AUTO["nodes"]["answer"], "knowledge": True}}},
    )
    assert flag.definition is not None
    assert flag.definition.flow.nodes["answer"].knowledge == KnowledgeSearch()


def test_validation_names_the_node_whose_retrieval_is_wrong(tmp_path: Path) -> None:
    nodes = {
        "answer": {
            "task": "Answer.",
            "knowledge": True,
            "functions": [{"name": RETRIEVAL_FUNCTION, "description": "Mine.", "transition_only": True}],
        },
        "act": {"type": "action", "knowledge": True, "run": {"name": "lookup"}, "transition_to": "bye"},
        "bye": {"type": "end", "task": "Bye."},
    }
    report = definition(tmp_path, {**AUTO, "nodes": nodes})
    errors = {e.path: e.message for e in report.errors}
    assert "automatic retrieval" in errors["nodes.answer.functions[0].name"]
    assert "node 'act' is of type action" in errors["nodes.act.knowledge"]
    alone = definition(tmp_path, {**AUTO, "knowledge": []})
    (missing,) = [e for e in alone.errors if e.path == "nodes.answer.knowledge"]
    assert "node 'answer'" in missing.message and "'knowledge:' at the top level" in missing.message
    bounds = definition(
        tmp_path, {**AUTO, "nodes": {**AUTO["nodes"], "answer": {"task": "A.", "knowledge": {"top_k": 0}}}}
    )
    assert any(e.path.startswith("nodes.answer.knowledge") for e in bounds.errors), bounds.errors
    other = definition(
        tmp_path, {**AUTO, "nodes": {**AUTO["nodes"], "answer": {"task": "A.", "knowledge": {"k": 3}}}}
    )
    assert any(e.path.startswith("nodes.answer.knowledge") for e in other.errors), other.errors
