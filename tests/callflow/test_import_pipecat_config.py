"""Pipecat Flows config files (1.x node configs and the early editor's convention).

The fixtures are written for these tests in the shapes Pipecat Flows uses:
``pipecat_config_bikes.json`` as a 1.x app keeps its node configs (``role_message``,
flat functions with ``handler`` and ``transition_to``, top-level ``global_functions``,
``tts_say``/``function``/``end_conversation`` actions), ``pipecat_config_early.json``
as the first editor's examples did (no ``transition_to``: a function named after a
node is the edge to it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ringflow.callflow.importers import import_flow
from ringflow.callflow.loader import validate_data
from ringflow.cli import app
from tests.support.paths import TESTS

FIXTURES = TESTS / "fixtures" / "import"
runner = CliRunner()


def load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def edges(flow: dict[str, Any]) -> set[tuple[str, str, str]]:
    """(owner, function, target) for every transition; owner '*' for global functions."""
    out = {
        ("*", f["name"], f["transition_to"]) for f in flow.get("global_functions", []) if "transition_to" in f
    }
    for nid, node in flow["nodes"].items():
        out |= {
            (nid, f["name"], f["transition_to"]) for f in node.get("functions", []) if "transition_to" in f
        }
    return out


def warnings(result: Any) -> str:
    return "\n".join(str(w) for w in result.warnings)


def assert_valid(flow: dict[str, Any]) -> None:
    report = validate_data(json.loads(json.dumps(flow)))
    assert report.errors == [], [str(e) for e in report.errors]


@pytest.fixture(scope="module")
def bikes() -> Any:
    return import_flow("pipecat-config", load("pipecat_config_bikes.json"))


def test_role_message_is_the_flows_role(bikes: Any) -> None:
    assert bikes.flow["role"] == (
        "You are Juno, who answers the phone at Spoke & Sprocket bike "
        "repairs. Short, friendly sentences; no lists."
    )
    assert "role_message" not in warnings(bikes)
    # a node with its own (deprecated role_messages) persona keeps exactly that persona
    status = bikes.flow["nodes"]["status"]
    assert status["add_role"] is False
    assert status["task"].startswith("You are Juno from the workshop desk. Only give facts")


def test_global_functions_are_carried(bikes: Any) -> None:
    talk, hours = bikes.flow["global_functions"]
    assert talk == {
        "name": "speak_to_mechanic",
        "transition_only": True,
        "description": "The caller wants to talk to a mechanic in person.",
        "transition_to": "handoff",
    }
    assert hours["capture"] is True
    assert hours["parameters"]["properties"]["day"]["type"] == "string"
    text = warnings(bikes)
    assert "global_functions' not carried" not in text
    assert "global_functions[1]: global: function 'opening_hours' handler __function__:opening_hours" in text


def test_every_edge_is_kept(bikes: Any) -> None:
    assert edges(bikes.flow) == {
        ("*", "speak_to_mechanic", "handoff"),
        ("greeting", "book_repair", "booking"),
        ("greeting", "repair_status", "status"),
        ("booking", "pick_day", "confirm"),
        ("status", "nothing_else", "goodbye"),
        ("confirm", "confirmed", "goodbye"),
        ("confirm", "change_day", "booking"),
    }
    repair = next(f for f in bikes.flow["nodes"]["greeting"]["functions"] if f["name"] == "repair_status")
    assert repair["capture"] is True and repair["parameters"]["required"] == ["ticket"]


def test_actions_and_end_nodes(bikes: Any) -> None:
    nodes = bikes.flow["nodes"]
    assert nodes["booking"]["pre_actions"] == [{"tts_say": "Let me open the workshop calendar."}]
    assert nodes["booking"]["context"] == "reset"
    assert "booking.pre_actions[1]: node 'booking': action of type function" in warnings(bikes)
    assert nodes["handoff"] == {
        "type": "end",
        "task": "Tell them a mechanic will call back within the hour.",
        "post_actions": [{"end_conversation": "Talk soon, bye."}],
    }
    assert nodes["goodbye"]["type"] == "end"
    assert [n for n, node in nodes.items() if node.get("type") == "end"] == ["handoff", "goodbye"]
    assert_valid(bikes.flow)


def test_role_message_wins_over_role_messages() -> None:
    data = {
        "nodes": {
            "only": {
                "role_message": "You are Ada.",
                "role_messages": [{"role": "system", "content": "You are Bob."}],
                "task_messages": [{"role": "developer", "content": "Say hi."}],
                "post_actions": [{"type": "end_conversation"}],
            }
        }
    }
    result = import_flow("pipecat-legacy", data)
    assert result.flow["role"] == "You are Ada."
    assert "both role_message and role_messages; role_message is used" in warnings(result)
    assert "no initial_node; 'only' is the start node" in warnings(result)
    assert_valid(result.flow)


def test_editor_export_with_role_message() -> None:
    data = {
        "meta": {"name": "tiny"},
        "nodes": [
            {
                "id": "a",
                "type": "initial",
                "data": {
                    "role_message": "You are Ada.",
                    "task_messages": [{"role": "system", "content": "Hi."}],
                    "functions": [{"name": "done", "description": "Done.", "next_node_id": "b"}],
                },
            },
            {"id": "b", "type": "end", "data": {"task_messages": [{"role": "system", "content": "Bye."}]}},
        ],
    }
    result = import_flow("pipecat", data)
    assert result.flow["role"] == "You are Ada."
    assert "role_message" not in warnings(result)
    assert_valid(result.flow)


# --- the early convention: a function named after a node is the edge to it ---------


@pytest.fixture(scope="module")
def cakes() -> Any:
    return import_flow("pipecat-legacy", load("pipecat_config_early.json"))


def test_function_named_after_a_node_is_the_edge(cakes: Any) -> None:
    assert edges(cakes.flow) == {
        ("start", "order_cake", "order_cake"),
        ("start", "collect", "collect"),
        ("order_cake", "end", "end"),
        ("collect", "end", "end"),
    }
    types = {nid: node.get("type", "agent") for nid, node in cakes.flow["nodes"].items()}
    assert types == {"start": "agent", "order_cake": "agent", "collect": "agent", "end": "end"}
    note = next(f for f in cakes.flow["nodes"]["order_cake"]["functions"] if f["name"] == "note_flavour")
    assert "transition_to" not in note and note["capture"] is True
    assert "towards an end" not in warnings(cakes)
    assert_valid(cakes.flow)


def test_a_function_with_a_handler_is_not_an_edge_by_its_name() -> None:
    data = {
        "initial_node": "a",
        "nodes": {
            "a": {
                "task_messages": [{"role": "system", "content": "Ask."}],
                "functions": [
                    {
                        "name": "b",
                        "description": "Look b up.",
                        "properties": {},
                        "required": [],
                        "handler": "__function__:b",
                    },
                    {
                        "name": "finish",
                        "description": "Done.",
                        "properties": {},
                        "required": [],
                        "transition_to": "b",
                    },
                ],
            },
            "b": {
                "task_messages": [{"role": "system", "content": "Bye."}],
                "post_actions": [{"type": "end_conversation"}],
            },
        },
    }
    result = import_flow("pipecat-legacy", data)
    assert edges(result.flow) == {("a", "finish", "b")}


# --- end to end: import, then validate the written file -----------------------------


@pytest.mark.parametrize("fixture", ["pipecat_config_bikes.json", "pipecat_config_early.json"])
def test_cli_import_then_validate(fixture: str, tmp_path: Path) -> None:
    out = tmp_path / "flow.yaml"
    imported = runner.invoke(app, ["flow", "import", str(FIXTURES / fixture), "-o", str(out)])
    assert imported.exit_code == 0, imported.output
    assert "detected format: Pipecat Flows config" in imported.stderr
    checked = runner.invoke(app, ["flow", "validate", str(out)])
    assert checked.exit_code == 0, checked.output
    # a config holds no name: the flow is named after the file
    assert f"{out}: valid" in checked.stdout
    assert out.read_text().startswith(f"flow: {fixture.removesuffix('.json')}\n")


# --- a role stays in force until a node sets another --------------------------------


def _node(task: str, to: list[str], role: str | None = None, end: bool = False) -> dict[str, Any]:
    node: dict[str, Any] = {
        "task_messages": [{"role": "developer", "content": task}],
        "functions": [
            {
                "name": f"to_{t}",
                "description": f"Go to {t}.",
                "properties": {},
                "required": [],
                "transition_to": t,
            }
            for t in to
        ],
    }
    if role:
        node["role_message"] = role
    if end:
        node["post_actions"] = [{"type": "end_conversation"}]
    return node


def test_a_role_set_on_a_node_carries_on_to_the_nodes_after_it() -> None:
    data = {
        "initial_node": "front",
        "nodes": {
            "front": _node("Greet.", ["billing"], role="You are the receptionist."),
            "billing": _node("Ask for the invoice.", ["explain"], role="You are the billing clerk."),
            "explain": _node("Explain the invoice.", ["bye"]),
            "bye": _node("Say goodbye.", [], end=True),
        },
    }
    result = import_flow("pipecat-config", data)
    nodes = result.flow["nodes"]
    assert result.flow["role"] == "You are the receptionist."
    assert "add_role" not in nodes["front"]
    for nid in ("billing", "explain", "bye"):
        assert nodes[nid]["add_role"] is False
        assert nodes[nid]["task"].startswith("You are the billing clerk.\n\n")
    assert "node 'explain': the role a node before it set differs" in warnings(result)
    assert_valid(result.flow)


def test_a_node_reached_with_two_roles_keeps_the_flows_and_says_so() -> None:
    data = {
        "initial_node": "front",
        "nodes": {
            "front": _node("Greet.", ["billing", "bye"], role="You are the receptionist."),
            "billing": _node("Ask for the invoice.", ["bye"], role="You are the billing clerk."),
            "bye": _node("Say goodbye.", [], end=True),
        },
    }
    result = import_flow("pipecat-config", data)
    assert "add_role" not in result.flow["nodes"]["bye"]
    assert "node 'bye': reached after nodes with different roles" in warnings(result)
