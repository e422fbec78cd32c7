"""``flow validate`` against the spec's rules: one fixture per rule, the examples, the
shared fixtures, and inputs no flow author should ever be able to crash it with."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringflow.callflow.errors import Issue
from ringflow.callflow.loader import MAX_FILE_BYTES, ValidationReport, load_flow, validate_data, validate_file
from ringflow.callflow.model import FlowDefinition
from tests.support.paths import ROOT

REPO = ROOT
FIXTURES = REPO / "tests" / "fixtures" / "flows"
EXPECTED: dict[str, Any] = json.loads((FIXTURES / "expected.json").read_text())
EXAMPLES = REPO / "examples"
SHARED = REPO.parent / "shared" / "fixtures" / "flows"

# What the matching error's message must say, so that it tells the author what to do.
HINTS: dict[str, str] = {
    "unknown_key.yaml": "did you mean 'allow_interrupt'?",
    "unknown_top_level_key.yaml": "did you mean 'global_functions'?",
    "unknown_key_in_function.yaml": "did you mean 'transition_to'?",
    "wrong_type_setting.yaml": "got 'a few'",
    "wrong_type_nested.yaml": "got 'lots'",
    "wrong_type_functions.yaml": "valid list (got a mapping)",
    "bad_flow_name.yaml": "try 'table_booking'",
    "bad_node_id.yaml": "try 'greet_caller'",
    "non_string_node_id.yaml": "must be text",
    "missing_task.yaml": "needs a task",
    "missing_task_end.yaml": "needs a task",
    "missing_nodes.yaml": "required key 'nodes' is missing",
    "start_unknown.yaml": "did you mean 'greet'?",
    "transition_unknown.yaml": "did you mean 'confirm'?",
    "branch_case_unknown.yaml": "did you mean 'waitlist'?",
    "branch_default_unknown.yaml": "did you mean 'sorry'?",
    "branch_table_empty.yaml": "at least one case",
    "gate_branch_unknown.yaml": "did you mean 'large_party'?",
    "gate_default_unknown.yaml": "did you mean 'small_party'?",
    "gate_without_default.yaml": "needs a default",
    "gate_var_unknown.yaml": "did you mean 'tier'?",
    "gate_var_capture_parameter.yaml": "did you mean 'size'?",
    "gate_var_state_unwritten.yaml": "did you mean 'party'?",
    "gate_with_task.yaml": "does not apply to a gate node",
    "gate_condition_without_op.yaml": "needs an 'op'",
    "gate_bad_op.yaml": "(got '=')",
    "agent_with_gate_keys.yaml": "only to gate or action nodes",
    "duplicate_function_node.yaml": "duplicate function name 'finish'",
    "duplicate_function_global.yaml": "a global function",
    "duplicate_global_functions.yaml": "duplicate global function name 'talk_to_human'",
    "transition_only_without_description.yaml": "needs a description",
    "transition_only_branch_table.yaml": "no result to branch on",
    "transition_only_without_target.yaml": "needs a transition_to",
    "two_kinds.yaml": "one kind only",
    "handler_with_description.yaml": "remove it here",
    "handler_with_parameters.yaml": "remove it here",
    "handler_missing.yaml": "did you mean 'find_table'?",
    "handler_without_module.yaml": "names no 'handlers' module",
    "handlers_module_missing.yaml": "'no_such_handlers_module_here' not found",
    "handler_wrong_first_param.yaml": "'flow_manager'",
    "handler_undocumented_param.yaml": "does not document parameter 'time'",
    "handler_not_async.yaml": "async def",
    "handler_without_docstring.yaml": "docstring needs a summary",
    "pre_action_handler_missing.yaml": "no function 'log_call_strat'",
    "end_with_transition.yaml": "no transitions",
    "dead_end.yaml": "dead end",
    "no_end_reachable.yaml": "no end node can be reached from the start node 'ask'",
    "no_end_node.yaml": "no end node can be reached",
    "undefined_var_task.yaml": "did you mean 'customer_name'?",
    "undefined_var_greeting.yaml": "'agent_name'",
    "undefined_var_role.yaml": "'business_name'",
    "undefined_var_description.yaml": "did you mean 'first_name'?",
    "undefined_var_speech.yaml": "'caller_first_name'",
    "undefined_var_http_url.yaml": "'order_number'",
    "undefined_var_action_text.yaml": "'shop_name'",
    "undefined_var_idle_goodbye.yaml": "'shop_name'",
    "bad_template_syntax.yaml": "bad placeholder '{{first name}}'",
    "capture_bad_schema.yaml": "not a valid JSON Schema",
    "capture_not_object.yaml": "type 'object'",
    "capture_without_parameters.yaml": "JSON Schema",
    "http_without_description.yaml": "needs a description",
    "action_without_run.yaml": "needs 'run'",
    "action_without_transition.yaml": "needs transition_to",
    "action_case_unknown.yaml": "did you mean 'no_order'?",
    "action_run_needs_arguments.yaml": "requires 'order_id'",
    "function_name_dash.yaml": "try 'end_call'",
    "function_name_too_long.yaml": "at most 64 characters (it has 73)",
    "extract_duplicate.yaml": "extracted twice",
    "variable_default_not_in_enum.yaml": "not one of its enum",
    "top_level_list.yaml": "mapping at the top level, not list",
    "invalid_yaml.yaml": "not valid YAML",
    "empty.yaml": "mapping at the top level",
    "invalid_json.json": "not valid JSON",
}


def _matching(errors: list[Issue], prefix: str) -> list[Issue]:
    """Errors at ``prefix`` or below it (``""`` means the file as a whole, exactly)."""
    if prefix == "":
        return [e for e in errors if e.path == ""]
    return [e for e in errors if e.path == prefix or e.path.startswith((f"{prefix}.", f"{prefix}["))]


def _describe(report: ValidationReport) -> str:
    return "\n".join(str(e) for e in report.errors) or "(no errors)"


# --- the fixture set itself ------------------------------------------------------------
def test_every_fixture_is_listed_and_every_listed_fixture_exists() -> None:
    for kind in ("invalid", "valid"):
        on_disk = {p.name for p in (FIXTURES / kind).iterdir() if p.suffix in (".yaml", ".json")}
        assert on_disk == set(EXPECTED[kind]), kind
    assert set(HINTS) == set(EXPECTED["invalid"])


# --- invalid fixtures: one per rule ------------------------------------------------------
@pytest.mark.parametrize("name", sorted(EXPECTED["invalid"]))
def test_invalid_fixture_fails_at_the_expected_place_with_a_hint(name: str) -> None:
    report = validate_file(FIXTURES / "invalid" / name)
    assert not report.ok
    assert report.definition is None
    prefix = EXPECTED["invalid"][name]
    here = _matching(report.errors, prefix)
    assert here, f"no error at {prefix!r}; got:\n{_describe(report)}"
    assert any(HINTS[name] in e.message for e in here), f"no hint {HINTS[name]!r}; got:\n{_describe(report)}"
    for e in report.errors:
        assert e.severity == "error"
        assert e.message and e.message == e.message.strip()
        assert "Traceback" not in e.message


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED["invalid"] if n.startswith("undefined_var_")))
def test_undefined_template_errors_say_how_to_fix_them(name: str) -> None:
    report = validate_file(FIXTURES / "invalid" / name)
    [err] = report.errors
    assert "declare it under 'variables'" in err.message
    assert "fallback" in err.message


def test_single_rule_fixtures_report_only_their_own_problem() -> None:
    """A typo in one place must not drown in follow-on errors elsewhere."""
    for name in (
        "unknown_key.yaml",
        "start_unknown.yaml",
        "handler_missing.yaml",
        "gate_without_default.yaml",
        "duplicate_function_node.yaml",
        "function_name_dash.yaml",
        "bad_flow_name.yaml",
    ):
        report = validate_file(FIXTURES / "invalid" / name)
        assert len(report.errors) == 1, f"{name}:\n{_describe(report)}"


def test_a_dead_end_is_named_and_other_nodes_are_not() -> None:
    report = validate_file(FIXTURES / "invalid" / "dead_end.yaml")
    assert [e.path for e in report.errors] == ["nodes.info"]


def test_all_problems_are_reported_in_one_run() -> None:
    data = {
        "flow": "many_problems",
        "start": "gret",
        "nodes": {
            "greet": {
                "task": "Hi {{nme}}.",
                "functions": [{"name": "go", "transition_only": True, "transition_to": "dne"}],
            },
            "done": {"type": "end", "task": "Bye."},
        },
    }
    paths = {e.path for e in validate_data(data).errors}
    assert {
        "start",
        "nodes.greet.task",
        "nodes.greet.functions[0].description",
        "nodes.greet.functions[0].transition_to",
    } <= paths


def test_shape_errors_do_not_hide_the_other_problems() -> None:
    """Misspelt keys and wrong types stopped validation before the template, gate and
    dead-end rules ran; now all of them come out in one run, and nothing is reported that
    only the set-aside parts would explain (a node whose transition was misspelt is not a
    dead end, an entry whose http was unreadable is not a handler entry)."""
    data = yaml.safe_load(
        """
flow: many
variables:
  tier: {type: string, defualt: basic}
nodes:
  greet:
    task: "Hello {{nmae}}."
    gretting: "Hi {{tier}}"
    functions:
      - {name: go, transition_only: true, description: Go on., transition_to: check}
      - {name: lookup, http: {url: 5}, description: Look up.}
  check:
    type: gate
    branches:
      - {when: {var: tier, op: "==", value: gold}, to: gold_end}
    default: basic_end
  basic_end: {type: end, task: "Bye {{tire}}."}
  loop:
    task: "Stuck {{undefined_thing}}."
    allow_interrupt: maybe
    functions:
      - {name: again, transition_only: true, description: Again., transiton_to: loop}
  stuck: {task: Stuck forever.}
"""
    )
    report = validate_data(data)
    assert report.definition is None
    assert sorted(e.path for e in report.errors) == [
        "nodes.basic_end.task",  # template
        "nodes.check.branches[0].to",  # gate
        "nodes.greet.functions[1].http.url",
        "nodes.greet.gretting",
        "nodes.greet.task",  # template
        "nodes.loop.allow_interrupt",
        "nodes.loop.functions[0].transiton_to",
        "nodes.loop.task",  # template
        "nodes.stuck",  # dead end
        "variables.tier.defualt",
    ], _describe(report)
    said = {e.path: e.message for e in report.errors}
    assert "did you mean 'greeting'?" in said["nodes.greet.gretting"]
    assert "did you mean 'tier'?" in said["nodes.basic_end.task"]
    assert "unknown node 'gold_end'" in said["nodes.check.branches[0].to"]
    assert said["nodes.stuck"].startswith("dead end")
    # loop lost a transition: where it leads is unknown, so nothing is called unreachable
    assert report.warnings == []


_END = {"type": "end", "task": "Bye {{nmae}}."}  # the problem a shape error hid
_TO_END = [{"name": "finish", "transition_only": True, "description": "Done.", "transition_to": "bye"}]


@pytest.mark.parametrize(
    ("broken", "shape_error_at"),
    [
        ({"flow": None}, "flow"),  # a required top-level key: checked under a stand-in name
        ({"nodes": {"ask": "Ask for a name.", "bye": _END}}, "nodes.ask"),  # a node: an end stand-in
        ({"variables": {"tier": "string"}}, "variables.tier"),  # still a name templates may use
        ({"mcp_servers": {"crm": {"url": "ftp://crm"}}}, "mcp_servers.crm"),  # still a server
        ({"start": 7}, "start"),  # the graph is not judged
    ],
)
def test_what_a_shape_error_sets_aside_leaves_the_rest_checked(
    broken: dict[str, Any], shape_error_at: str
) -> None:
    data: dict[str, Any] = {
        "flow": "aside",
        "variables": {"tier": {"type": "string"}},
        "mcp_servers": {"crm": {"url": "https://crm.example.com/mcp"}},
        "nodes": {
            "ask": {
                "task": "Ask, on the {{tier}} plan.",
                "functions": [*_TO_END, {"name": "look_up", "mcp": {"server": "crm", "tool": "find"}}],
            },
            "bye": _END,
        },
    }
    data.update(broken)
    if data["flow"] is None:
        del data["flow"]
    report = validate_data(data, load_handlers=False)
    assert [e.path for e in report.errors] == [shape_error_at, "nodes.bye.task"], _describe(report)


@pytest.mark.parametrize(
    "name",
    sorted(n for n in EXPECTED["invalid"] if EXPECTED["invalid"][n] and n != "unknown_top_level_key.yaml"),
)
def test_a_typo_beside_a_problem_does_not_hide_it(name: str) -> None:
    """Every rule's fixture with one misspelt top-level key more: the same errors, plus the
    typo's own (a misspelt key used to be the only error reported)."""
    alone = validate_file(FIXTURES / "invalid" / name)
    data = yaml.load((FIXTURES / "invalid" / name).read_text(), Loader=yaml.SafeLoader)
    assert isinstance(data, dict) and alone.errors
    data["descriptoin"] = "a typo"
    both = validate_data(data, base_dir=FIXTURES / "invalid")
    typo = Issue("descriptoin", "unknown key 'descriptoin' (did you mean 'description'?)")
    assert sorted(map(str, both.errors)) == sorted(map(str, [*alone.errors, typo]))


def test_handler_modules_beside_each_flow_are_loaded_not_a_same_named_one() -> None:
    """valid/ and invalid/ both have a ``fixture_handlers`` module with different functions."""
    good = validate_file(FIXTURES / "valid" / "all_features.yaml")
    bad = validate_file(FIXTURES / "invalid" / "handler_missing.yaml")
    again = validate_file(FIXTURES / "valid" / "all_features.yaml")
    assert good.ok and again.ok, _describe(good)
    assert not bad.ok
    assert good.definition is not None
    assert set(good.definition.handlers) == {"quote_price", "account_status", "note"}


def test_handlers_are_not_imported_when_not_asked_to() -> None:
    data = yaml.safe_load((FIXTURES / "invalid" / "handlers_module_missing.yaml").read_text())
    report = validate_data(data, base_dir=FIXTURES / "invalid", load_handlers=False)
    assert report.ok, _describe(report)


# --- templates ---------------------------------------------------------------------------
def _one_node_flow(task: str, **top: Any) -> dict[str, Any]:
    return {
        "flow": "templated",
        **top,
        "nodes": {
            "greet": {
                "task": task,
                "functions": [
                    {
                        "name": "finish",
                        "transition_only": True,
                        "description": "Done.",
                        "transition_to": "done",
                    }
                ],
            },
            "done": {"type": "end", "task": "Bye."},
        },
    }


@pytest.mark.parametrize(
    "task",
    [
        "Hello {{caller_number}} at {{current_time}} on {{current_date}}, call {{call_id}} to {{called_number}}.",  # noqa: E501
        "Your order {{state.order.id}} of {{state.order.items.0.name}}.",
        "Hello {{ name | there }}.",
        "Hello {{name|}}.",
        "No placeholders at all, just {braces} and }} and {{",
    ],
)
def test_templates_that_are_defined(task: str) -> None:
    report = validate_data(_one_node_flow(task))
    assert report.ok, _describe(report)


def test_declared_and_extracted_names_are_defined_anywhere_in_the_flow() -> None:
    data = _one_node_flow(
        "Hello {{first_name}}, you said {{reason}}.",
        variables={"first_name": {"type": "string", "required": True}},
    )
    data["nodes"]["done"]["extract"] = [{"name": "reason", "type": "string"}]
    assert validate_data(data).ok


@pytest.mark.parametrize("task", ["Hello {{frist_name}}.", "Hello {{first_name.nick}} {{nick}}."])
def test_templates_that_are_not_defined(task: str) -> None:
    data = _one_node_flow(task, variables={"first_name": {"type": "string"}})
    report = validate_data(data)
    assert not report.ok
    assert all(e.path == "nodes.greet.task" for e in report.errors)


# --- valid fixtures and warnings -----------------------------------------------------------
@pytest.mark.parametrize("name", sorted(EXPECTED["valid"]))
def test_valid_fixture_passes_with_exactly_the_expected_warnings(name: str) -> None:
    report = validate_file(FIXTURES / "valid" / name)
    assert report.ok, _describe(report)
    assert report.definition is not None
    assert [w.path for w in report.warnings] == EXPECTED["valid"][name]
    assert all(w.severity == "warning" for w in report.warnings)
    assert report.as_dict()["valid"] is True


def test_warning_messages_explain_themselves() -> None:
    [unreachable] = validate_file(FIXTURES / "valid" / "warn_unreachable.yaml").warnings
    assert "unreachable" in unreachable.message and "'orphan'" in unreachable.message
    [cycle] = validate_file(FIXTURES / "valid" / "warn_cycle_globals.yaml").warnings
    assert "ask -> clarify" in cycle.message and "global functions" in cycle.message


def test_a_real_exit_from_the_cycle_silences_the_warning() -> None:
    data = yaml.safe_load((FIXTURES / "valid" / "warn_cycle_globals.yaml").read_text())
    data["nodes"]["clarify"]["functions"].append(
        {"name": "answered", "transition_only": True, "description": "Clear answer.", "transition_to": "done"}
    )
    report = validate_data(data)
    assert report.ok and report.warnings == []


def test_a_cycle_without_any_exit_is_an_error_not_a_warning() -> None:
    data = yaml.safe_load((FIXTURES / "valid" / "warn_cycle_globals.yaml").read_text())
    data["global_functions"] = []
    report = validate_data(data)
    assert {"nodes.ask", "nodes.clarify"} <= {e.path for e in report.errors}


def test_the_definition_carries_handler_specs_for_the_engine() -> None:
    report = validate_file(FIXTURES / "valid" / "all_features.yaml")
    assert report.definition is not None
    specs = report.definition.handlers
    assert specs["quote_price"].parameters["required"] == ["product"]
    assert specs["quote_price"].parameters["properties"]["product"]["enum"] == ["basic", "plus"]
    assert specs["account_status"].timeout_s == 3
    assert specs["account_status"].cancel_on_interruption is True
    flow = report.definition.flow
    assert flow.start_node == "check_account"
    # YAML ``1``/``true`` case keys are kept in canonical form
    assert set(flow.nodes["check_account"].transition_to.cases) == {"1", "0"}  # type: ignore[union-attr]
    assert set(flow.nodes["intro"].functions[0].transition_to.cases) == {"true", "false"}  # type: ignore[union-attr]


def test_a_long_chain_of_nodes_validates_without_recursion_trouble() -> None:
    n = 3000
    nodes: dict[str, Any] = {
        f"n{i}": {
            "task": f"Step {i}.",
            "functions": [
                {
                    "name": "next",
                    "transition_only": True,
                    "description": "Next.",
                    "transition_to": f"n{i + 1}" if i + 1 < n else "done",
                }
            ],
        }
        for i in range(n)
    }
    nodes["done"] = {"type": "end", "task": "Bye."}
    report = validate_data({"flow": "chain", "nodes": nodes})
    assert report.ok, _describe(report)


# --- examples ------------------------------------------------------------------------------
EXAMPLE_FLOWS = sorted((EXAMPLES / "flows").glob("*/flow.yaml"))
SCRIPTS = sorted((EXAMPLES / "scripts").glob("*.yaml"))


def test_there_are_at_least_four_examples_with_two_scripts_each() -> None:
    assert len(EXAMPLE_FLOWS) >= 4
    assert (EXAMPLES / "flows" / "appointment_reminder" / "flow.yaml") in EXAMPLE_FLOWS
    for flow in EXAMPLE_FLOWS:
        name = flow.parent.name
        assert len([s for s in SCRIPTS if s.name.startswith(f"{name}_")]) >= 2, name


@pytest.mark.parametrize("path", EXAMPLE_FLOWS, ids=lambda p: p.parent.name)
def test_example_validates_without_warnings(path: Path) -> None:
    report = validate_file(path)
    assert report.ok, _describe(report)
    assert report.warnings == [], "\n".join(map(str, report.warnings))
    assert report.definition is not None
    assert report.definition.flow.flow == path.parent.name


@pytest.mark.parametrize("path", EXAMPLE_FLOWS, ids=lambda p: p.parent.name)
def test_example_definition_survives_a_json_round_trip(path: Path) -> None:
    """A call's workflow receives its definition as JSON: loading it back must give the same flow."""
    definition = validate_file(path).definition
    assert definition is not None
    assert FlowDefinition.model_validate_json(definition.model_dump_json()) == definition


def test_example_handler_modules_have_distinct_names() -> None:
    named = [(p, validate_file(p).definition.flow.handlers) for p in EXAMPLE_FLOWS]  # type: ignore[union-attr]
    modules = [m for _, m in named if m is not None]  # (a flow of captures and transitions has none)
    assert len(modules) >= 4
    assert len(set(modules)) == len(modules)
    for path, module in named:
        assert module is None or (path.parent / f"{module}.py").is_file()


def _functions_of(flow: dict[str, Any]) -> set[str]:
    names = {f["name"] for f in flow.get("global_functions", [])}
    for nid, node in flow["nodes"].items():
        names |= {f["name"] for f in node.get("functions", [])}
        if "global" in node:  # offered as a tool named after the node; a returning one has go_back
            names |= {nid, "go_back"} if node["global"].get("return") else {nid}
    return names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_example_script_is_consistent_with_its_flow(script: Path) -> None:
    """What can be checked without running a call: names, nodes and keys all exist."""
    doc = yaml.safe_load(script.read_text())
    assert set(doc) <= {
        "flow",
        "variables",
        "turns",
        "extract",
        "expect",
        "dial",
        "transfer_answer",
        "jobs",
        "device",
        "analysis",
    }
    flow_path = (script.parent / doc["flow"]).resolve()
    assert flow_path.is_file()
    # as loaded: a subflow node's used flow is inlined (its nodes `verify.ask_dob`, its functions)
    flow = load_flow(flow_path).flow.model_dump(mode="json", by_alias=True, exclude_unset=True)
    declared = flow.get("variables", {})
    for name in doc.get("variables") or {}:
        assert name in declared, f"{name} is not a variable of {flow['flow']}"
    for name, var in declared.items():
        if var.get("required") and "default" not in var:
            assert name in (doc.get("variables") or {}), f"required variable {name} missing"
    functions = _functions_of(flow) | {t["name"] for t in (doc.get("device") or {}).get("tools", [])}
    if any("jobs" in f for n in flow["nodes"].values() for f in n.get("functions", [])):
        functions.add("cancel_jobs")  # the built-in offered while a cancellable group runs
        jobs = {
            j["name"]
            for n in flow["nodes"].values()
            for f in n.get("functions", [])
            for j in f.get("jobs", {}).get("run", [])
        }
        assert set(doc.get("jobs") or {}) <= jobs
    # no turns: a call that ends at its first node's greeting (order_status_no_order)
    for turn in doc.get("turns") or []:
        assert len({"user", "silence", "dtmf", "supervisor"} & set(turn)) == 1, turn
        assert set(turn) <= {"user", "llm", "silence", "dtmf", "empty", "supervisor", "takeover", "handback"}
        if isinstance(turn.get("handback"), str):  # the node the bot resumes at
            assert turn["handback"] in flow["nodes"], turn["handback"]
        for item in turn.get("llm") or []:
            assert set(item) in ({"say"}, {"call"}, {"call", "args"}), item
            if "call" in item:
                assert item["call"] in functions, item["call"]
    for node, values in (doc.get("extract") or {}).items():
        specs = {x["name"] for x in flow["nodes"][node].get("extract", [])}
        assert set(values) <= specs, (node, values)
    expect = doc["expect"]
    assert set(expect) <= {
        "path",
        "state",
        "variables",
        "disposition",
        "end_reason",
        "transfer",
        "said",
        "not_said",
        "recording",
        "analysis",
    }
    assert expect["path"][0] == flow.get("start", next(iter(flow["nodes"])))
    assert all(n in flow["nodes"] for n in expect["path"])
    if "disposition" in expect and expect.get("end_reason", "completed") == "completed":
        last = flow["nodes"][expect["path"][-1]]
        assert last.get("type") == "end" and last.get("disposition") == expect["disposition"]
    assert expect.get("end_reason", "completed") in (
        "completed",
        "user_hangup",
        "user_idle",
        "max_duration",
        "max_transitions",
        "loop_detected",
        "agent_lost",
        "error",
        "no_answer",
        "busy",
        "dial_failed",
        "voicemail",
        "transferred",
    )


# --- the shared fixtures (present in the development workspace, not in a clone) ----------------
def _shared_cases() -> Iterator[Any]:
    expected_file = SHARED / "invalid" / "expected_errors.json"
    if not expected_file.is_file():
        yield pytest.param(None, None, marks=pytest.mark.skip(reason="shared fixtures absent"), id="absent")
        return
    for name, prefix in sorted(json.loads(expected_file.read_text()).items()):
        yield pytest.param(SHARED / "invalid" / name, prefix, id=f"invalid/{name}")
    for path in sorted((SHARED / "valid").glob("*.yaml")):
        yield pytest.param(path, None, id=f"valid/{path.name}")


@pytest.mark.parametrize(("path", "prefix"), list(_shared_cases()))
def test_shared_fixture(path: Path, prefix: str | None) -> None:
    report = validate_file(path)
    if prefix is None:
        assert report.ok, _describe(report)
    else:
        assert not report.ok
        assert _matching(report.errors, prefix), f"no error at {prefix!r}; got:\n{_describe(report)}"


# --- malformed input never raises ------------------------------------------------------------
def _assert_clean_report(report: ValidationReport) -> None:
    assert isinstance(report, ValidationReport)
    assert report.ok == (report.definition is not None)
    for issue in [*report.errors, *report.warnings]:
        assert isinstance(issue.path, str) and isinstance(issue.message, str) and issue.message
    json.dumps(report.as_dict())


FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FAST
@given(raw=st.binary(max_size=600))
def test_random_bytes_file(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "random.yaml"
    path.write_bytes(raw)
    _assert_clean_report(validate_file(path))


@FAST
@given(text=st.text(max_size=600))
def test_random_text_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "random.json"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    _assert_clean_report(validate_file(path))


_yaml_tokens = st.sampled_from(
    [
        "flow:",
        "nodes:",
        "  ",
        "\n",
        "- ",
        "task:",
        "type: end",
        "{",
        "}",
        "[",
        "]",
        "&a",
        "*a",
        "!!python/object:os.system",
        "!!binary",
        "? ",
        ": ",
        "'",
        '"',
        "functions:",
        "transition_to:",
        "1",
        "null",
        "true",
        "x",
        "{{a}}",
        "\t",
        "#",
    ]
)


@FAST
@given(tokens=st.lists(_yaml_tokens, max_size=60))
def test_yaml_like_noise(tmp_path: Path, tokens: list[str]) -> None:
    path = tmp_path / "noise.yaml"
    path.write_text("".join(tokens), encoding="utf-8")
    _assert_clean_report(validate_file(path))


_json_like = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from(["end", "gate", "action", "agent", "done", "greet", "{{x}}", "status"]),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "flow",
                    "nodes",
                    "task",
                    "type",
                    "functions",
                    "name",
                    "transition_to",
                    "cases",
                    "field",
                    "default",
                    "branches",
                    "when",
                    "var",
                    "op",
                    "run",
                    "http",
                    "url",
                    "parameters",
                    "properties",
                    "capture",
                    "transition_only",
                    "description",
                    "greet",
                    "done",
                    "extract",
                    "pre_actions",
                    "tts_say",
                    "settings",
                    "idle",
                ]
            )
            | st.text(max_size=8)
            | st.integers()
            | st.none()
            | st.booleans(),
            inner,
            max_size=5,
        )
    ),
    max_leaves=40,
)


def test_a_key_written_as_the_marker_pydantic_uses_for_bad_keys() -> None:
    """Pydantic marks a mapping key that is not text with a trailing ``[key]`` in the error's
    location; a key the user wrote as ``"[key]"`` ends the location the same way. Taking it for
    that mark raised IndexError (hypothesis found ``{'[key]': None}``): it is an unknown key
    named where it is, and a real non-text key is still reported as one."""
    top = validate_data({"[key]": None})
    assert ("[key]", "unknown key '[key]'") in [(e.path, e.message) for e in top.errors], top.errors
    nested = validate_data({"flow": "a", "nodes": {"a": {"task": "t", "[key]": None}}})
    assert [(e.path, e.message) for e in nested.errors] == [("nodes.a.[key]", "unknown key '[key]'")]
    in_list = validate_data({"flow": "a", "nodes": {"a": {"task": "t", "functions": [{"[key]": 1}]}}})
    assert ("nodes.a.functions[0].[key]", "unknown key '[key]'") in [
        (e.path, e.message) for e in in_list.errors
    ], in_list.errors
    not_text = validate_data({"flow": "a", "nodes": {1: {"task": "t"}}})
    assert [(e.path, e.message) for e in not_text.errors] == [
        ("nodes.1", "key 1 must be text: quote it or rename it")
    ]


@settings(max_examples=200, deadline=None)
@given(data=_json_like)
def test_random_structures(data: Any) -> None:
    _assert_clean_report(validate_data(data))


@settings(max_examples=100, deadline=None)
@given(nodes=st.dictionaries(st.text(min_size=1, max_size=6), _json_like, max_size=4))
def test_random_nodes_under_a_valid_top_level(nodes: dict[str, Any]) -> None:
    _assert_clean_report(validate_data({"flow": "fuzzed", "nodes": nodes}))


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if prefix:
        yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


WRONG_VALUES: list[Any] = [
    None,
    -1,
    2.5,
    True,
    "{{ bad name }}",
    [1],
    {"a": 1},
    {1: "x"},
    {"type": "object", "properties": 5},
]


def test_wrong_types_at_every_level_never_raise() -> None:
    base = yaml.safe_load((FIXTURES / "valid" / "all_features.yaml").read_text())
    base_dir = FIXTURES / "valid"
    paths = list(_paths(base))
    assert len(paths) > 150
    failures = 0
    for path in paths:
        for wrong in WRONG_VALUES:
            data = copy.deepcopy(base)
            target = data
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = copy.deepcopy(wrong)
            report = validate_data(data, base_dir=base_dir)
            _assert_clean_report(report)
            failures += not report.ok
    assert failures > len(paths) * len(WRONG_VALUES) // 2  # most of these are real mistakes


@pytest.mark.parametrize("key", [1, None, True, 2.5])
def test_non_string_keys(key: Any) -> None:
    top = {key: "x", "flow": "keys", "nodes": {"done": {"type": "end", "task": "Bye."}}}
    nested = {"flow": "keys", "nodes": {"done": {"type": "end", "task": "Bye.", key: 1}}}
    node_id = {"flow": "keys", "nodes": {key: {"type": "end", "task": "Bye."}}}
    for data in (top, nested, node_id):
        report = validate_data(data)
        _assert_clean_report(report)
        assert not report.ok
        assert any("must be text" in e.message for e in report.errors), _describe(report)


@pytest.mark.parametrize("value", [[], [1, 2], "flow: x", 42, 4.2, None, True, b"bytes"])
def test_non_mapping_top_level(value: Any) -> None:
    report = validate_data(value)
    assert not report.ok
    [err] = report.errors
    assert err.path == "" and "mapping at the top level" in err.message


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("deep.json", "[" * 100_000 + "]" * 100_000),
        ("deep.yaml", "[" * 100_000 + "]" * 100_000),
        ("deep_map.json", '{"a":' * 100_000 + "1" + "}" * 100_000),
        ("deep_flow.yaml", "a: " + "[" * 100_000),
        ("deep_block.yaml", "".join("  " * i + f"k{i}:\n" for i in range(400))),
    ],
)
def test_deep_nesting(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    report = validate_file(path)
    _assert_clean_report(report)
    assert not report.ok
    [err] = report.errors
    assert err.path == ""
    assert "nest" in err.message or "not valid" in err.message


def test_deeply_nested_data_given_directly() -> None:
    data: Any = {"flow": "deep", "nodes": {"done": {"type": "end", "task": "Bye."}}}
    inner: Any = "x"
    for _ in range(5000):
        inner = [inner]
    data["description"] = inner
    report = validate_data(data)
    assert not report.ok
    assert "nested deeper" in report.errors[0].message


def test_huge_file(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    filler = "# " + "x" * 1000 + "\n"
    path.write_text("flow: huge\n" + filler * (MAX_FILE_BYTES // len(filler) + 10), encoding="utf-8")
    assert path.stat().st_size > MAX_FILE_BYTES
    report = validate_file(path)
    assert not report.ok
    [err] = report.errors
    assert "at most" in err.message and str(MAX_FILE_BYTES) in err.message


def test_yaml_alias_bomb(tmp_path: Path) -> None:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, 10):
        prev = f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [{', '.join([prev] * 9)}]")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\nflow: bomb\nnodes: {done: {type: end, task: Bye.}}\n")
    report = validate_file(path)
    assert not report.ok
    [err] = report.errors
    assert "elements" in err.message


def test_yaml_python_tags_are_not_executed(tmp_path: Path) -> None:
    path = tmp_path / "tag.yaml"
    path.write_text("flow: !!python/object/apply:os.system ['echo pwned']\nnodes: {}\n")
    report = validate_file(path)
    assert not report.ok
    assert "not valid YAML" in report.errors[0].message


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("flow: café\n".encode("latin-1"))
    report = validate_file(path)
    assert not report.ok
    assert "UTF-8" in report.errors[0].message


def test_unreadable_file_raises_file_not_found_only(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        validate_file(tmp_path / "missing.yaml")
    with pytest.raises(FileNotFoundError):
        validate_file(tmp_path)  # a directory


def test_duplicate_yaml_keys_are_errors_not_silently_merged(tmp_path: Path) -> None:
    """``true`` and ``1`` are one Python key: a branch table must not lose a case quietly."""
    flow = tmp_path / "dup.yaml"
    flow.write_text(
        "flow: dup\nnodes:\n  a:\n    task: Hi.\n    functions:\n"
        "      - name: f\n        capture: true\n        description: d\n"
        "        parameters: {type: object, properties: {ok: {type: boolean}}}\n"
        "        transition_to: {field: ok, cases: {true: b, 1: c}}\n"
        "  b: {type: end, task: Bye.}\n  c: {type: end, task: Bye.}\n"
    )
    report = validate_file(flow)
    assert not report.ok and "duplicate key 1 (it is the same key as True)" in report.errors[0].message
    flow.write_text("flow: dup\nnodes:\n  a: {type: end, task: Hi.}\n  a: {type: end, task: Again.}\n")
    report = validate_file(flow)
    assert not report.ok and "duplicate key 'a'" in report.errors[0].message


def test_case_keys_equal_as_text_are_an_error() -> None:
    data = {
        "flow": "x",
        "nodes": {
            "a": {
                "task": "t",
                "functions": [
                    {
                        "name": "f",
                        "capture": True,
                        "description": "d",
                        "parameters": {"type": "object", "properties": {}},
                        "transition_to": {"field": "s", "cases": {1: "b", "1": "b"}},
                    }
                ],
            },
            "b": {"type": "end", "task": "bye"},
        },
    }
    report = validate_data(data)
    assert [e.path for e in report.errors] == ["nodes.a.functions[0].transition_to.cases"]
