"""Dograh workflows that Dograh itself refuses to publish are refused, naming the rule.

The rules and their wording are Dograh's (its node specs' counts and edge limits, its
edge schema and references); ``lenient`` imports such a file anyway, each broken rule
a warning. What Dograh accepts keeps importing, whatever Ringflow cannot carry of it.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ringflow.callflow.importers import FlowImportError, import_flow
from ringflow.callflow.loader import validate_data
from ringflow.cli import app

runner = CliRunner()


def node(nid: str, kind: str, name: str, prompt: str | None = "Handle it.") -> dict[str, Any]:
    data: dict[str, Any] = {"name": name}
    if prompt is not None:
        data["prompt"] = prompt
    return {"id": nid, "type": kind, "position": {"x": 0, "y": 0}, "data": data}


def edge(
    eid: str, src: str, dst: str, lbl: str = "next", condition: str | None = "When ready."
) -> dict[str, Any]:
    data: dict[str, Any] = {"label": lbl}
    if condition is not None:
        data["condition"] = condition
    return {"id": eid, "source": src, "target": dst, "data": data}


def workflow() -> dict[str, Any]:
    """A workflow Dograh publishes: start -> agent -> end, plus global, webhook, trigger."""
    return {
        "name": "Clinic line",
        "workflow_definition": {
            "nodes": [
                node("s", "startCall", "Hello"),
                node("a", "agentNode", "Ask"),
                node("e", "endCall", "Bye"),
                node("g", "globalNode", "Persona"),
                {"id": "w", "type": "webhook", "data": {"name": "CRM"}},
                {"id": "t", "type": "trigger", "data": {"name": "API"}},
            ],
            "edges": [edge("e1", "s", "a", "Ask them"), edge("e2", "a", "e", "Done")],
        },
    }


def graph(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["workflow_definition"]


def test_a_workflow_dograh_publishes_imports() -> None:
    result = import_flow("dograh", workflow())
    assert not [w for w in result.warnings if "Dograh refuses" in w.message]
    assert validate_data(copy.deepcopy(result.flow)).ok


def _with(change: Any) -> dict[str, Any]:
    doc = workflow()
    change(graph(doc))
    return doc


CASES = [
    (
        "edge into the start node",
        lambda g: g["edges"].append(edge("x", "a", "s", "Restart")),
        "workflow_definition.nodes[0]: node 'Hello' (id s): Start Call cannot have incoming edges",
    ),
    (
        "edge into a webhook node",
        lambda g: g["edges"].append(edge("x", "a", "w", "Notify")),
        "workflow_definition.nodes[4]: node 'CRM' (id w): Webhook cannot have incoming edges",
    ),
    (
        "edge out of a webhook node",
        lambda g: g["edges"].append(edge("x", "w", "a", "Notify")),
        "workflow_definition.nodes[4]: node 'CRM' (id w): Webhook cannot have outgoing edges",
    ),
    (
        "edge out of a global node",
        lambda g: g["edges"].append(edge("x", "g", "a", "Jump")),
        "workflow_definition.nodes[3]: node 'Persona' (id g): Global Node cannot have outgoing edges",
    ),
    (
        "edge to a node that does not exist",
        lambda g: g["edges"].append(edge("x", "a", "nope", "Ghost")),
        "workflow_definition.edges[2]: edge x: Edge references missing node nope",
    ),
    (
        "edge from a node that does not exist",
        lambda g: g["edges"].append(edge("x", "gone", "a", "Ghost")),
        "workflow_definition.edges[2]: edge x: Edge references missing node gone",
    ),
    (
        "no start node",
        lambda g: g["nodes"].__setitem__(0, node("s", "agentNode", "Hello")),
        "workflow_definition.nodes: workflow: Workflow must have at least one Start Call",
    ),
    (
        "two start nodes",
        lambda g: (
            g["nodes"].append(node("s2", "startCall", "Again")),
            g["edges"].append(edge("x", "s2", "a", "Ask")),
        ),
        "workflow_definition.nodes: workflow: Workflow can have at most one Start Call",
    ),
    (
        "two global nodes",
        lambda g: g["nodes"].append(node("g2", "globalNode", "Persona 2")),
        "workflow_definition.nodes: workflow: Workflow can have at most one Global Node",
    ),
    (
        "two trigger nodes",
        lambda g: g["nodes"].append({"id": "t2", "type": "trigger", "data": {"name": "API 2"}}),
        "workflow_definition.nodes: workflow: Workflow can have at most one API Trigger",
    ),
    (
        "edge out of an end node",
        lambda g: g["edges"].append(edge("x", "e", "a", "Again")),
        "workflow_definition.nodes[2]: node 'Bye' (id e): End Call cannot have outgoing edges",
    ),
    (
        "agent node nothing leads to",
        lambda g: g["nodes"].append(node("o", "agentNode", "Orphan")),
        "workflow_definition.nodes[6]: node 'Orphan' (id o): Agent Node must have at least 1 incoming edge(s)",  # noqa: E501
    ),
    (
        "two edges with the same tool name",
        lambda g: g["edges"].append(edge("x", "s", "e", "ask-them")),
        'workflow_definition.edges[2].data.label: edge x: Transition tool name "ask_them" is duplicated '
        "for this node. Use a unique edge label.",
    ),
    (
        "node without a prompt",
        lambda g: g["nodes"].__setitem__(1, node("a", "agentNode", "Ask", prompt="  ")),
        "workflow_definition.nodes[1]: node 'Ask' (id a): Prompt is required for agent nodes",
    ),
    (
        "edge without a condition",
        lambda g: g["edges"].__setitem__(1, edge("e2", "a", "e", "Done", condition=None)),
        "workflow_definition.edges[1].data.condition: edge e2: an edge needs a condition (text)",
    ),
]


@pytest.mark.parametrize(("change", "rule"), [(c, r) for _, c, r in CASES], ids=[n for n, _, _ in CASES])
def test_refused_naming_the_rule(change: Any, rule: str) -> None:
    doc = _with(change)
    with pytest.raises(FlowImportError) as caught:
        import_flow("dograh", doc)
    assert "Dograh refuses to publish this workflow" in str(caught.value)
    assert rule in str(caught.value)


@pytest.mark.parametrize(("change", "rule"), [(c, r) for _, c, r in CASES], ids=[n for n, _, _ in CASES])
def test_lenient_imports_with_the_rule_as_a_warning(change: Any, rule: str) -> None:
    result = import_flow("dograh", _with(change), lenient=True)
    path, _, message = rule.partition(": ")
    assert any(
        w.path == path and w.message == f"Dograh refuses to publish this: {message}" for w in result.warnings
    ), [str(w) for w in result.warnings]
    assert validate_data(copy.deepcopy(result.flow)).ok


def test_a_bare_graph_is_checked_too() -> None:
    bare = graph(_with(lambda g: g["edges"].append(edge("x", "a", "s", "Restart"))))
    with pytest.raises(FlowImportError, match=r"nodes\[0\]: node 'Hello' \(id s\): Start Call cannot"):
        import_flow("dograh", bare)


def test_every_broken_rule_is_listed_at_once() -> None:
    doc = _with(
        lambda g: (
            g["edges"].append(edge("x", "a", "s", "Restart")),
            g["edges"].append(edge("y", "g", "a", "Jump")),
        )
    )
    with pytest.raises(FlowImportError) as caught:
        import_flow("dograh", doc)
    message = str(caught.value)
    assert "Start Call cannot have incoming edges" in message
    assert "Global Node cannot have outgoing edges" in message


def test_cli_refuses_then_lenient_imports(tmp_path: Path) -> None:
    src = tmp_path / "dograh.json"
    src.write_text(json.dumps(_with(lambda g: g["edges"].append(edge("x", "a", "w", "Notify")))))
    refused = runner.invoke(app, ["flow", "import", str(src)])
    assert refused.exit_code == 1 and refused.stdout == ""
    assert "Traceback" not in refused.output
    assert (
        "Dograh refuses to publish this workflow, so it is not imported (--lenient imports it anyway)"
        in refused.stderr
    )
    assert "Webhook cannot have incoming edges" in refused.stderr
    out = tmp_path / "flow.yaml"
    taken = runner.invoke(app, ["flow", "import", "--lenient", str(src), "-o", str(out)])
    assert taken.exit_code == 0, taken.output
    assert (
        "warning: workflow_definition.nodes[4]: Dograh refuses to publish this: "
        "node 'CRM' (id w): Webhook cannot have incoming edges" in taken.stderr
    )
    assert runner.invoke(app, ["flow", "validate", str(out)]).exit_code == 0
