"""``ringflow flow validate|show|graph``: exit codes, output shapes, and no tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ringflow.cli import app
from tests.support.paths import ROOT

REPO = ROOT
FIXTURES = REPO / "tests" / "fixtures" / "flows"
VALID = FIXTURES / "valid" / "minimal.yaml"
WARNS = FIXTURES / "valid" / "warn_unreachable.yaml"
INVALID = FIXTURES / "invalid" / "unknown_key.yaml"
APPOINTMENT = REPO / "examples" / "flows" / "appointment_reminder" / "flow.yaml"

runner = CliRunner()


def run(*args: str | Path) -> tuple[int, str, str]:
    result = runner.invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"the command raised {result.exception!r}\n{result.output}")
    assert "Traceback" not in result.output
    return result.exit_code, result.stdout, result.stderr


def json_lines(stdout: str) -> list[dict[str, object]]:
    docs = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    for doc in docs:
        assert set(doc) == {"file", "valid", "errors", "warnings", "notes"}
        assert isinstance(doc["valid"], bool)
        for issue in [*doc["errors"], *doc["warnings"], *doc["notes"]]:  # type: ignore[misc]
            assert set(issue) == {"path", "message"}
            assert isinstance(issue["path"], str) and isinstance(issue["message"], str)
    return docs


# --- validate: exit codes ------------------------------------------------------------------
def test_valid_file_exits_0() -> None:
    code, out, _ = run("flow", "validate", VALID)
    assert code == 0
    assert out.strip() == f"{VALID}: valid"


def test_warnings_are_printed_and_still_exit_0() -> None:
    code, out, _ = run("flow", "validate", WARNS)
    assert code == 0
    assert f"{WARNS}: warning: nodes.orphan: unreachable" in out
    assert out.strip().endswith(f"{WARNS}: valid (1 warning)")


def test_invalid_file_exits_1_with_path_message_and_hint() -> None:
    code, out, _ = run("flow", "validate", INVALID)
    assert code == 1
    assert (
        f"{INVALID}: error: nodes.greet.alow_interrupt: unknown key 'alow_interrupt' "
        "(did you mean 'allow_interrupt'?)"
    ) in out
    assert ": valid" not in out


def test_missing_file_exits_2() -> None:
    code, _, err = run("flow", "validate", FIXTURES / "nope.yaml")
    assert code == 2
    assert "cannot read" in err and "nope.yaml" in err


def test_directory_exits_2() -> None:
    code, _, err = run("flow", "validate", FIXTURES)
    assert code == 2
    assert "cannot read" in err


def test_no_file_is_a_usage_error() -> None:
    code, _, _ = run("flow", "validate")
    assert code == 2


def test_unknown_option_is_a_usage_error() -> None:
    code, _, _ = run("flow", "validate", "--jsn", VALID)
    assert code == 2


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ((VALID, WARNS), 0),
        ((VALID, INVALID), 1),
        ((INVALID, VALID), 1),
        ((VALID, FIXTURES / "nope.yaml"), 2),
        ((FIXTURES / "nope.yaml", INVALID), 2),
    ],
)
def test_several_files_exit_with_the_worst_code(files: tuple[Path, ...], expected: int) -> None:
    code, out, err = run("flow", "validate", *files)
    assert code == expected
    for f in files:
        assert str(f) in out + err  # every file is reported, not just the first bad one


def test_every_invalid_fixture_exits_1() -> None:
    files = sorted(p for p in (FIXTURES / "invalid").iterdir() if p.suffix in (".yaml", ".json"))
    for f in files:
        code, out, _ = run("flow", "validate", f)
        assert code == 1, f
        assert f"{f}: error: " in out


# --- validate --json -------------------------------------------------------------------------
def test_json_one_document_per_file() -> None:
    code, out, err = run("flow", "validate", "--json", VALID, WARNS, INVALID)
    assert code == 1
    assert err == ""
    docs = json_lines(out)
    assert [d["file"] for d in docs] == [str(VALID), str(WARNS), str(INVALID)]
    assert [d["valid"] for d in docs] == [True, True, False]
    assert docs[0]["errors"] == [] and docs[0]["warnings"] == []
    [warning] = docs[1]["warnings"]  # type: ignore[misc]
    assert warning["path"] == "nodes.orphan" and "unreachable" in warning["message"]
    hint = "unknown key 'alow_interrupt' (did you mean 'allow_interrupt'?)"
    assert docs[2]["errors"] == [{"path": "nodes.greet.alow_interrupt", "message": hint}]


def test_json_for_a_missing_file() -> None:
    missing = FIXTURES / "nope.yaml"
    code, out, _ = run("flow", "validate", "--json", missing, VALID)
    assert code == 2
    docs = json_lines(out)
    assert docs[0]["file"] == str(missing) and docs[0]["valid"] is False
    assert docs[0]["errors"][0]["path"] == ""  # type: ignore[index]
    assert docs[1]["valid"] is True


def test_json_for_a_file_that_is_not_a_flow(tmp_path: Path) -> None:
    junk = tmp_path / "junk.yaml"
    junk.write_bytes(b"\xff\xfe\x00garbage")
    code, out, _ = run("flow", "validate", "--json", junk)
    assert code == 1
    [doc] = json_lines(out)
    assert doc["valid"] is False and doc["errors"][0]["path"] == ""  # type: ignore[index]


# --- robustness -------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("command", ["validate", "show", "graph"])
def test_random_bytes_never_give_a_traceback(tmp_path: Path, seed: int, command: str) -> None:
    import random

    rnd = random.Random(seed)
    junk = tmp_path / f"junk{seed}.yaml"
    junk.write_bytes(bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 400))))
    code, out, err = run("flow", command, junk)
    assert code == 1
    assert "error" in out + err


@pytest.mark.parametrize("command", ["show", "graph"])
def test_show_and_graph_on_missing_file_exit_2(command: str) -> None:
    code, out, err = run("flow", command, FIXTURES / "nope.yaml")
    assert code == 2
    assert out == ""
    assert "cannot read" in err


@pytest.mark.parametrize("command", ["show", "graph"])
def test_show_and_graph_refuse_an_invalid_flow(command: str) -> None:
    code, out, err = run("flow", command, INVALID)
    assert code == 1
    assert out == ""
    assert "nodes.greet.alow_interrupt" in err


# --- show -------------------------------------------------------------------------------------
def test_show_table() -> None:
    code, out, _ = run("flow", "show", APPOINTMENT)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("flow appointment_reminder v1: ")
    assert lines[1] == "start: verify_identity"
    header = next(line for line in lines if line.startswith("NODE"))
    assert header.split() == ["NODE", "TYPE", "FUNCTION", "GOES", "TO"]
    body = "\n".join(lines)
    assert "check_identity (handler)" in body
    assert "status=verified: remind, status=mismatch: verify_identity, default: human_handoff" in body
    assert "wrong_person (transition_only)" in body
    assert "caller_wants_human (transition_only, global)" in body
    assert "list_open_slots (handler)" in body and "(stays)" in body
    assert "ends call (callback_requested)" in body
    # one row starts with each node id, in the order of the file
    firsts = [line.split()[0] for line in lines[lines.index(header) + 1 :] if line and not line[0].isspace()]
    assert firsts == [
        "verify_identity",
        "remind",
        "reschedule",
        "confirmed",
        "rescheduled",
        "cancelled",
        "wrong_number",
        "human_handoff",
    ]
    # globals are not offered on end nodes
    end_rows = [line for line in lines if line.startswith(("confirmed", "human_handoff"))]
    assert all("global" not in row for row in end_rows)


def test_show_gate_and_action_rows() -> None:
    code, out, _ = run("flow", "show", FIXTURES / "valid" / "all_features.yaml")
    assert code == 0
    assert "run account_status" in out
    assert "vip=1: route, vip=0: intro, default: intro" in out
    route = [line for line in out.splitlines() if line.startswith("route")]
    assert route and "gate" in route[0] and "branch 1" in route[0]
    assert "record_budget (capture)" in out and "lookup_catalogue (http)" in out


# --- graph ------------------------------------------------------------------------------------
def test_graph_is_mermaid_with_every_node_and_edge() -> None:
    code, out, _ = run("flow", "graph", APPOINTMENT)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "flowchart TD"
    assert '    verify_identity["verify_identity"]' in lines
    assert '    confirmed(["confirmed (end)"])' in lines
    assert '    verify_identity -->|"check_identity status=verified"| remind' in lines
    assert '    verify_identity -->|"check_identity status=mismatch"| verify_identity' in lines
    assert '    remind -->|"will_attend"| confirmed' in lines
    assert '    remind -.->|"caller_wants_human"| human_handoff' in lines  # globals are dotted
    assert not any(line.startswith("    confirmed -") for line in lines)  # end nodes lead nowhere
    assert lines[-1].startswith("    class ") and "human_handoff" in lines[-1]


def test_graph_shapes_for_gate_and_action() -> None:
    code, out, _ = run("flow", "graph", FIXTURES / "valid" / "all_features.yaml")
    assert code == 0
    assert '    route{"route (gate)"}' in out
    assert '    check_account[["check_account (action)"]]' in out
    assert '    route -->|"default"| intro' in out


def test_graph_node_called_end_does_not_break_mermaid(tmp_path: Path) -> None:
    flow = tmp_path / "flow.yaml"
    flow.write_text(
        "flow: keywords\nnodes:\n"
        "  graph:\n    task: Chat.\n    functions:\n"
        "      - {name: stop, transition_only: true, description: Stop., transition_to: end}\n"
        "  end:\n    type: end\n    task: Bye.\n"
    )
    code, out, _ = run("flow", "graph", flow)
    assert code == 0
    assert '    Graph -->|"stop"| End' in out
    assert '    End(["end (end)"])' in out
    assert not any(line.split()[:1] == ["end"] for line in out.splitlines())


# --- the installed command, in a real process -----------------------------------------------
def _command() -> list[str]:
    exe = Path(sys.executable).with_name("ringflow")
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "ringflow.cli"]


def _subprocess(*args: str | Path, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run(
        [*_command(), *map(str, args)], capture_output=True, text=True, cwd=cwd, env=env, timeout=60
    )


def test_real_process_validate_json_and_exit_code() -> None:
    proc = _subprocess("flow", "validate", "--json", VALID, INVALID)
    assert proc.returncode == 1, proc.stderr
    docs = json_lines(proc.stdout)
    assert [d["valid"] for d in docs] == [True, False]
    assert "Traceback" not in proc.stderr


def test_real_process_module_entry_point_and_missing_file() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ringflow.cli", "flow", "validate", "missing.yaml"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "cannot read" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_real_process_show_with_a_relative_path() -> None:
    """As a user types it from the repository root."""
    proc = _subprocess("flow", "show", "examples/flows/appointment_reminder/flow.yaml")
    assert proc.returncode == 0, proc.stderr
    assert "verify_identity" in proc.stdout
