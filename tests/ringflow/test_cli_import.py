"""``ringflow flow import``: format detection, size limit, hostile input, exit codes.

Each hostile document here crashed the importer with a traceback before; now each
gets one ``error:`` line naming where the problem is, and a non-zero exit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from ringflow.callflow.importers import FlowImportError, detect_source, import_flow
from ringflow.callflow.loader import MAX_FILE_BYTES, validate_data
from ringflow.cli import app
from tests.support.paths import ROOT

REPO = ROOT
FIXTURES = REPO / "tests" / "fixtures" / "import"

runner = CliRunner()


def run(*args: str | Path) -> tuple[int, str, str]:
    result = runner.invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"the command raised {result.exception!r}\n{result.output}")
    assert "Traceback" not in result.output
    return result.exit_code, result.stdout, result.stderr


def write(tmp_path: Path, data: Any, name: str = "in.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


# --- format detection ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "said"),
    [
        ("dograh_pizza.json", "detected format: Dograh workflow (--from dograh)"),
        ("pipecat_editor_clinic.json", "detected format: Pipecat Flows editor export (--from pipecat)"),
        ("pipecat_legacy_bank.json", "detected format: Pipecat Flows config (--from pipecat-legacy)"),
    ],
)
def test_from_is_optional_and_the_detected_format_is_said(fixture: str, said: str, tmp_path: Path) -> None:
    out = tmp_path / "flow.yaml"
    code, _, err = run("flow", "import", FIXTURES / fixture, "--lenient", "-o", out)
    assert f"{FIXTURES / fixture}: {said}" in err
    assert code == 0, err
    assert validate_data(yaml.safe_load(out.read_text())).ok


def test_a_pipecat_function_into_a_missing_node_is_refused_unless_lenient(tmp_path: Path) -> None:
    src = FIXTURES / "pipecat_editor_clinic.json"  # go_nowhere goes to no_such_node
    out = tmp_path / "flow.yaml"
    code, _, err = run("flow", "import", src, "-o", out)
    assert code == 1, err
    assert "function 'go_nowhere' goes to unknown node no_such_node" in err and "--lenient" in err
    assert not out.exists()
    code, _, err = run("flow", "import", src, "--lenient", "-o", out)
    assert code == 0, err
    assert "warning: nodes[1].data.functions[1]: node 'pick_slot': function 'go_nowhere'" in err
    assert validate_data(yaml.safe_load(out.read_text())).ok


def test_a_config_without_initial_node_is_detected(tmp_path: Path) -> None:
    src = write(
        tmp_path,
        {
            "nodes": {
                "hello": {
                    "role_message": "You are Kim.",
                    "task_messages": [{"role": "system", "content": "Greet."}],
                    "post_actions": [{"type": "end_conversation"}],
                }
            }
        },
    )
    code, out, err = run("flow", "import", src)
    assert "detected format: Pipecat Flows config" in err
    assert code == 0, err
    assert yaml.safe_load(out)["nodes"]["hello"]["type"] == "end"


def test_undetectable_input_asks_for_from(tmp_path: Path) -> None:
    code, out, err = run("flow", "import", write(tmp_path, {"steps": [1, 2]}))
    assert code == 1 and out == ""
    assert "could be recognised; say which with --from" in err


def test_from_accepts_the_format_names(tmp_path: Path) -> None:
    code, _, err = run("flow", "import", "--from", "pipecat-config", FIXTURES / "pipecat_legacy_bank.json")
    assert code == 0, err
    assert "detected" not in err
    code, _, err = run("flow", "import", "--from", "vapi", FIXTURES / "pipecat_legacy_bank.json")
    assert code == 2 and "--from must be one of" in err


# --- hostile input ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "data", "message"),  # source None: detected from the file
    [
        (
            None,
            {"nodes": [{"id": "a", "type": ["startCall"], "data": {"prompt": "Hi."}}], "edges": []},
            "nodes[0].type: a node's type must be a string such as 'agentNode', not a list",
        ),
        (
            "dograh",
            {"workflow_definition": {"nodes": [{"id": "a", "type": {"t": 1}, "data": {}}], "edges": []}},
            "workflow_definition.nodes[0].type: a node's type must be a string such as 'agentNode', "
            "not an object",
        ),
        (
            None,
            {"meta": {"name": "x"}, "nodes": [{"id": "a", "type": ["initial"], "data": {}}]},
            "nodes[0].type: a node's type must be a string such as 'node', not a list",
        ),
        (
            "pipecat",
            {"meta": {"name": "x"}, "nodes": [{"id": "a", "type": 7, "data": {}}]},
            "nodes[0].type: a node's type must be a string such as 'node', not a number (7)",
        ),
        (
            None,
            {
                "meta": {"name": "x"},
                "nodes": [
                    {
                        "id": "a",
                        "type": "initial",
                        "data": {
                            "functions": [
                                {"name": "check", "description": "Check.", "decision": {"conditions": 5}}
                            ]
                        },
                    }
                ],
            },
            "nodes[0].data.functions[0].decision.conditions: a decision's conditions must be a list, "
            "not a number (5)",
        ),
    ],
)
def test_wrong_json_types_are_clear_errors(
    source: str | None, data: Any, message: str, tmp_path: Path
) -> None:
    chosen = ("--from", source) if source else ()
    code, out, err = run("flow", "import", *chosen, write(tmp_path, data))
    assert code == 1 and out == ""
    assert message in err
    assert err.count("error:") == 1


def test_a_50_mb_input_is_refused_up_front(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    prompt = "Say hello. " * (50 * 1024 * 1024 // 11)
    big.write_text(
        json.dumps(
            {
                "nodes": [{"id": "1", "type": "startCall", "data": {"name": "Start", "prompt": prompt}}],
                "edges": [],
            }
        )
    )
    code, out, err = run("flow", "import", "--from", "dograh", big)
    assert code == 2 and out == ""
    assert f"a flow may be at most {MAX_FILE_BYTES}" in err


def test_huge_text_in_parsed_data_is_refused() -> None:
    data = {
        "nodes": [
            {"id": "1", "type": "startCall", "data": {"name": "Start", "prompt": "x" * (MAX_FILE_BYTES + 1)}}
        ],
        "edges": [],
    }
    with pytest.raises(FlowImportError, match=r"more than \d+ characters of text"):
        import_flow("dograh", data, lenient=True)


def test_a_graph_without_telling_types_is_detected_by_what_its_nodes_hold() -> None:
    assert detect_source({"nodes": [{"id": "1", "type": 3, "data": {"prompt": "Hi."}}]}) == "dograh"
    assert detect_source({"nodes": [{"id": "a", "data": {"task_messages": []}}], "edges": []}) == "pipecat"
    assert detect_source({"nodes": [{"id": "a", "data": {"prompt": "x", "functions": []}}]}) is None
