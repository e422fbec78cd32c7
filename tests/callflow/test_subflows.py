"""Subflows (issue 32 §2): a ``subflow`` node's flow read, checked across the boundary and
inlined; the engine entering it with the inputs alone, returning at its end nodes with its
outputs, and keeping each scope's values apart (``callflow/subflows.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ringflow.callflow.compiled import compiled_for
from ringflow.callflow.effects import Rejected, Say
from ringflow.callflow.events import ExtractionResult, FunctionCalled, HangUp
from ringflow.callflow.loader import load_flow, validate_data, validate_file
from ringflow.callflow.model import FlowDefinition
from ringflow.callflow.render import mermaid
from ringflow.callflow.subflow_handlers import handler_module, module_keys
from ringflow.callflow.subflow_use import digest_of
from tests.support import engine_flows as ef
from tests.support.paths import ROOT

EXAMPLES = ROOT / "examples" / "flows"
SUB = ef.FIXTURES / "subflows"


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def caller(use: str = "subflows/check.yaml", **node: Any) -> ef.Data:
    sub = {"type": "subflow", "use": use, "inputs": {"who": "{{name}}"}, "transition_to": "after", **node}
    return ef.flow(
        {
            "start": ef.agent(ef.go("go_sub", "sub"), extract=[{"name": "mood", "type": "string"}]),
            "sub": sub,
            "after": ef.agent(ef.go("finish", "bye"), task="After {{rating | none}}."),
            "bye": ef.end(),
        },
        variables={
            "name": {"type": "string", "default": "Kim"},
            "secret": {"type": "string", "default": "s3"},
        },
    )


def errors_of(data: ef.Data, base: Path = ef.FIXTURES) -> list[str]:
    return [str(e) for e in validate_data(data, base_dir=base).errors]


# --- loading and inlining --------------------------------------------------------------------
def test_the_used_flows_nodes_are_inlined_under_the_node_with_a_spec_of_what_it_runs() -> None:
    definition = load_flow(EXAMPLES / "pharmacy_refill" / "flow.yaml")
    nodes = list(definition.flow.nodes)
    assert nodes[nodes.index("verify") + 1 :][:3] == [
        "verify.ask_dob",
        "verify.verified",
        "verify.not_verified",
    ]
    spec = definition.subflows["verify"]
    assert (spec.flow, spec.start, spec.use) == (
        "verify_identity",
        "verify.ask_dob",
        "../verify_identity/flow.yaml",
    )
    assert set(spec.variables) == {"first_name", "date_of_birth", "business"}
    used = load_flow(EXAMPLES / "verify_identity" / "flow.yaml")
    assert spec.digest == digest_of(used)
    ask = definition.flow.nodes["verify.ask_dob"]
    assert ask.functions[0].transition_to.cases == {"true": "verify.verified", "false": "verify.not_verified"}  # type: ignore[union-attr]
    # the used flow's role before its task, the calling flow's role and global nodes not placed there
    assert ask.task is not None and ask.task.startswith("You are checking who is on the phone")
    assert not ask.add_role and not ask.global_nodes
    # a definition is what a call carries: it survives the wire unchanged
    assert FlowDefinition.model_validate_json(definition.model_dump_json()) == definition


def test_two_flows_use_one_subflow_with_the_same_content() -> None:
    a = load_flow(EXAMPLES / "pharmacy_refill" / "flow.yaml").subflows["verify"]
    b = load_flow(EXAMPLES / "billing_enquiry" / "flow.yaml").subflows["verify"]
    assert a.digest == b.digest and a.flow == b.flow == "verify_identity"


def test_subflows_nest_and_their_ids_say_the_path() -> None:
    definition = load_flow(SUB / "outer.yaml")
    assert {"inner", "inner.ask", "inner.yes", "after"} <= set(definition.flow.nodes)
    wrapped = ef.build(caller(use="subflows/outer.yaml", inputs={"name": "{{name}}"}))
    assert wrapped.subflows["sub.inner"].start == "sub.inner.ask"
    assert wrapped.subflows["sub"].start == "sub.inner"
    assert wrapped.flow.nodes["sub.inner.ask"].functions[1].transition_to == "sub.inner.no"
    eng = ef.Engine(wrapped)
    call = ef.Call(eng)
    call(FunctionCalled(name="go_sub", at=ef.T0 + 1))
    assert call.state.node == "sub.inner.ask"
    assert call.state.variables == {"who": "Kim", "tier": "gold"}
    assert [f.node for f in call.state.subflows] == ["sub", "sub.inner"]
    call.call("answer", v=1)  # inner's end: back in outer, on 'after'
    assert call.state.node == "sub.after" and call.state.variables == {"name": "Kim"}
    assert call.state.waiting is not None  # its task reads inner's output, still being extracted
    call(ExtractionResult(node="sub.inner.ask", id="sub.inner.ask#1", values={"rating": 2}))
    assert call.state.extracted == {"rating": 2} and call.state.waiting is None  # outer's, now
    call.call("finish")  # outer's end: back in the calling flow
    assert call.state.node == "after" and call.state.subflows == []
    assert call.state.state["sub"] == {
        "end": "fin",
        "state": {"inner": {"end": "yes", "state": {"answer": {"v": 1}}}},
    }
    assert call.state.path == [
        "start",
        "sub",
        "sub.inner",
        "sub.inner.ask",
        "sub.inner.yes",
        "sub.after",
        "sub.fin",
        "after",
    ]
    assert call.state.extracted == {"rating": 2}  # outputs travel up each return


def test_the_graph_enters_the_subflow_and_returns_from_each_end_node() -> None:
    text = mermaid(load_flow(EXAMPLES / "billing_enquiry" / "flow.yaml").flow)
    assert 'verify -->|"subflow"| verify__ask_dob' in text
    assert 'verify__verified -->|"return"| balance' in text
    assert 'verify__not_verified -->|"return"| goodbye' in text


# --- validation --------------------------------------------------------------------------------
def test_a_missing_file_names_the_node_and_the_file() -> None:
    errors = errors_of(caller(use="subflows/nope.yaml"))
    assert len(errors) == 1
    assert errors[0].startswith("nodes.sub.use: no subflow file 'subflows/nope.yaml' (looked for ")
    assert errors[0].endswith("subflows/nope.yaml)")


def test_a_cycle_of_subflows_is_refused_naming_the_files(tmp_path: Path) -> None:
    node = {"type": "subflow", "use": "b.yaml", "transition_to": "fin"}
    write(tmp_path / "a.yaml", ef.flow({"s": node, "fin": ef.end()}, **{"flow": "a"}))
    write(tmp_path / "b.yaml", ef.flow({"s": {**node, "use": "a.yaml"}, "fin": ef.end()}, **{"flow": "b"}))
    report = validate_file(tmp_path / "a.yaml")
    assert [str(e) for e in report.errors] == [
        "nodes.s.use: subflow b.yaml: nodes.s.use: subflows use each other in a cycle: "
        "a.yaml -> b.yaml -> a.yaml"
    ]
    write(tmp_path / "self.yaml", ef.flow({"s": {**node, "use": "self.yaml"}, "fin": ef.end()}))
    assert [str(e) for e in validate_file(tmp_path / "self.yaml").errors] == [
        "nodes.s.use: subflows use each other in a cycle: self.yaml -> self.yaml"
    ]


def test_an_invalid_used_flow_is_reported_at_the_node_with_its_own_paths(tmp_path: Path) -> None:
    write(tmp_path / "bad.yaml", ef.flow({"ask": ef.agent(ef.go("on", "nowhere")), "fin": ef.end()}))
    errors = errors_of(caller(use="bad.yaml", inputs={}), base=tmp_path)
    assert any(
        e.startswith(
            "nodes.sub.use: subflow bad.yaml: nodes.ask.functions[0].transition_to: unknown node 'nowhere'"
        )
        for e in errors
    ), errors


def test_inputs_are_checked_against_the_used_flows_variables() -> None:
    errors = errors_of(caller(inputs={"whoo": "{{name}}", "tier": 3}))
    assert (
        "nodes.sub.inputs.whoo: 'whoo' is not an input of subflow subflows/check.yaml "
        "(did you mean 'who'?) (its variables: tier, who)" in errors
    )
    assert "nodes.sub.inputs.tier: subflow subflows/check.yaml takes 'tier' as string, not int" in errors
    assert (
        "nodes.sub.inputs: subflow subflows/check.yaml requires the input 'who': bind it under inputs"
        in errors
    )
    undefined = errors_of(caller(inputs={"who": "{{nobody}}"}))
    assert len(undefined) == 1 and undefined[0].startswith(
        "nodes.sub.inputs.who: undefined template variable 'nobody'"
    )


def test_the_route_on_return_is_checked_against_the_used_flows_end_nodes() -> None:
    wrong_field = errors_of(
        caller(transition_to={"field": "status", "cases": {"yes": "after"}, "default": "bye"})
    )
    assert wrong_field[0].startswith(
        "nodes.sub.transition_to.field: a subflow's result is the end node it finished on: branch on 'end'"
    )
    errors = errors_of(caller(transition_to={"field": "end", "cases": {"yes": "after", "nah": "bye"}}))
    assert "nodes.sub.transition_to.cases.nah: subflow subflows/check.yaml has no end node 'nah'" in errors
    assert (
        "nodes.sub.transition_to: subflow subflows/check.yaml can end on no, which no "
        "case takes: add them or a default" in errors
    )
    assert errors_of(caller(transition_to={"field": "end", "cases": {"yes": "after", "no": "bye"}})) == []
    assert "nodes.sub.transition_to: unknown node 'elsewhere'" in errors_of(caller(transition_to="elsewhere"))


def test_keys_of_other_node_kinds_and_what_cannot_travel_are_refused(tmp_path: Path) -> None:
    errors = errors_of(caller(task="Talk.", functions=[ef.go("x", "bye")]))
    assert "nodes.sub.task: 'task' does not apply to a subflow node (its nodes are the used flow's)" in errors
    assert (
        "nodes.sub.functions: 'functions' does not apply to a subflow node (its nodes are the used flow's)"
        in errors
    )
    missing = caller()
    del missing["nodes"]["sub"]["use"], missing["nodes"]["sub"]["transition_to"]
    assert set(errors_of(missing)) >= {
        "nodes.sub.use: a subflow node needs 'use': the flow it runs (a file beside this "
        "one, or NAME@VERSION)",
        "nodes.sub.transition_to: a subflow node needs transition_to: where the call "
        "goes when the subflow ends",
    }
    misplaced = caller()
    misplaced["nodes"]["after"]["inputs"] = {"x": 1}
    assert "nodes.after.inputs: 'inputs' applies only to a subflow node (type: subflow)" in errors_of(
        misplaced
    )
    digressing = ef.flow(
        {
            "ask": ef.agent(ef.go("on", "fin")),
            "h": ef.agent(task="H.", **{"global": {"description": "H?", "return": True, "max_uses": 1}}),
            "fin": ef.end(),
        }
    )
    write(tmp_path / "digressing.yaml", digressing)
    assert errors_of(caller(use="digressing.yaml", inputs={}), base=tmp_path) == [
        "nodes.sub.use: subflow digressing.yaml: node 'h' is a global node: digressions "
        "belong to the calling flow"
    ]


# --- a used flow's handlers module ------------------------------------------------------------
def handler_entry(name: str, to: str) -> ef.Data:
    return {"name": name, "transition_to": to}


def handled(tmp_path: Path, code: str, *functions: ef.Data, name: str = "sub_handlers") -> None:
    """A used flow ``handled.yaml`` in ``tmp_path`` whose ``handlers`` module has ``code``."""
    (tmp_path / f"{name}.py").write_text(code)
    node = ef.agent(*(functions or (handler_entry("check", "fin"),)))
    write(tmp_path / "handled.yaml", ef.flow({"ask": node, "fin": ef.end()}, handlers=name))


SUB_CHECK = (
    "from ringflow import TRANSITION_IN_YAML\n\n"
    "async def check(flow_manager, date_of_birth: str):\n"
    '    """Check the date.\n\n    Args:\n        date_of_birth: The date said.\n    """\n'
    "    return {}, TRANSITION_IN_YAML\n"
)


def test_a_used_flows_handlers_are_its_own_beside_the_callers_of_the_same_name(tmp_path: Path) -> None:
    """The caller's ``check`` (engine_handlers, no arguments) and the used flow's ``check``
    (its own module, a date argument): both kept, each node's function compiled from its own
    flow's, and each run ordered with its flow's scope."""
    handled(tmp_path, SUB_CHECK)
    (tmp_path / f"{ef.HANDLERS}.py").write_text((ef.FIXTURES / f"{ef.HANDLERS}.py").read_text())
    data = caller(use="handled.yaml", inputs={})
    data["handlers"] = ef.HANDLERS
    data["nodes"]["after"]["functions"] = [handler_entry("check", "bye")]
    report = validate_data(data, base_dir=tmp_path, source=str(tmp_path / "flow.yaml"))
    assert report.definition is not None, report.errors
    d = report.definition
    assert set(d.handlers) == {"check", "sub.check"}
    assert d.subflows["sub"].handlers == "sub_handlers"
    flow = compiled_for(d)
    ours, theirs = flow.nodes["after"].functions["check"], flow.nodes["sub.ask"].functions["check"]
    assert (ours.scope, theirs.scope) == ("", "sub")
    assert "date_of_birth" not in ours.parameters.get("properties", {})
    assert list(theirs.parameters["properties"]) == ["date_of_birth"]
    assert handler_module(d, "sub") == ("sub_handlers", str(tmp_path / "handled.yaml"))
    assert handler_module(d, "") == (ef.HANDLERS, str(tmp_path / "flow.yaml"))
    assert module_keys(d) == {
        ef.HANDLERS: (ef.HANDLERS, None),
        "sub_handlers@handled.yaml": ("sub_handlers", "handled.yaml"),
    }


def test_a_used_flows_handler_is_checked_naming_the_subflow_and_the_function(tmp_path: Path) -> None:
    handled(tmp_path, SUB_CHECK, handler_entry("verify", "fin"))
    assert errors_of(caller(use="handled.yaml", inputs={}), base=tmp_path) == [
        "nodes.sub.use: subflow handled.yaml: nodes.ask.functions[0].name: handlers module "
        "'sub_handlers' has no function 'verify'"
    ]
    handled(tmp_path, "def check(flow_manager):\n    return {}, None\n", name="sync_handlers")
    (error,) = errors_of(caller(use="handled.yaml", inputs={}), base=tmp_path)
    assert error.startswith("nodes.sub.use: subflow handled.yaml: nodes.ask.functions[0]")
    assert "handler 'check': " in error
    # validated without importing handlers (uploaded text), neither flow's module is imported
    report = validate_data(caller(use="handled.yaml", inputs={}), base_dir=tmp_path, load_handlers=False)
    assert not report.errors and report.definition is not None and not report.definition.handlers


def test_a_used_flow_with_mcp_servers_is_refused_saying_where_they_go(tmp_path: Path) -> None:
    servers = {"crm": {"url": "http://127.0.0.1:9/mcp"}}
    write(
        tmp_path / "mcp.yaml",
        ef.flow({"ask": ef.agent(ef.go("on", "fin")), "fin": ef.end()}, mcp_servers=servers),
    )
    assert errors_of(caller(use="mcp.yaml", inputs={}), base=tmp_path) == [
        "nodes.sub.use: subflow mcp.yaml has mcp_servers: a call reaches only the calling flow's "
        "MCP servers (declare them there, and call their tools from the calling flow's nodes)"
    ]


def test_a_published_version_with_a_handlers_module_is_refused_as_a_subflow() -> None:
    used = load_flow(SUB / "check.yaml")
    used = used.model_copy(update={"flow": used.flow.model_copy(update={"handlers": "h"})})
    report = validate_data(
        caller(use="check@0123456789ab"), base_dir=ef.FIXTURES, versions=lambda ref: (used, "0123456789ab")
    )
    assert [str(e) for e in report.errors] == [
        "nodes.sub.use: subflow check@0123456789ab has a handlers module ('h'): a published "
        "version used as a subflow brings none (its module is found beside a file): use the "
        "flow's file"
    ]


def test_a_published_version_reference_needs_a_flow_store() -> None:
    errors = errors_of(caller(use="check@0123456789ab"))
    assert errors == [
        "nodes.sub.use: 'check@0123456789ab' names a published version, and no flow store is at hand here "
        "(RINGFLOW_DATABASE_URL): use the flow's file instead"
    ]
    used = load_flow(SUB / "check.yaml")
    found = validate_data(
        caller(use="check@0123456789ab"), base_dir=ef.FIXTURES, versions=lambda ref: (used, "0123456789ab")
    )
    assert found.definition is not None and found.definition.subflows["sub"].digest == "0123456789ab"

    def unknown(ref: str) -> tuple[FlowDefinition, str]:
        raise LookupError("no version of flow 'check' is published")

    missing = validate_data(caller(use="check@0123456789ab"), base_dir=ef.FIXTURES, versions=unknown)
    assert [str(e) for e in missing.errors] == [
        "nodes.sub.use: subflow 'check@0123456789ab': no version of flow 'check' is published"
    ]


# --- the engine ---------------------------------------------------------------------------------
def entered() -> ef.Call:
    call = ef.Call(ef.engine(caller(inputs={"who": "{{name}}", "tier": "{{mood | plain}}"})))
    call(FunctionCalled(name="go_sub", at=ef.T0 + 1))
    return call


def test_entering_binds_the_inputs_alone_and_keeps_the_callers_values_in_a_frame() -> None:
    call = entered()
    # the call waits on nothing: 'mood' (read by an input) is being extracted, so it waits
    assert call.state.waiting is not None and call.state.waiting.node == "sub"
    call(ExtractionResult(node="start", id="start#1", values={"mood": "calm"}))
    s = call.state
    assert s.node == "sub.ask" and s.path == ["start", "sub", "sub.ask"]
    assert s.variables == {"who": "Kim", "tier": "calm"}  # not 'name', not 'secret'
    assert s.extracted == {} and s.state == {}
    assert s.subflows[0].variables == {"name": "Kim", "secret": "s3"}
    assert s.subflows[0].extracted == {"mood": "calm"}
    greeting = [e for e in call.effects if isinstance(e, Say)][-1]
    assert greeting.text == "Hello Kim, tier calm."
    prompt = next(e for e in call.effects if e.type == "set_node")
    assert prompt.prompt.startswith("You check Kim.")  # type: ignore[attr-defined]
    # its own global function is offered, and the calling flow's functions are not its own
    assert "sub_note" in [t.name for t in prompt.tools]  # type: ignore[attr-defined]


def test_the_end_node_returns_with_the_outputs_and_routes_on_where_it_ended() -> None:
    call = entered()
    call(ExtractionResult(node="start", id="start#1", values={"mood": "calm"}))
    call.call("sub_note", v=7)
    effects = call.call("answer", v=1)
    s = call.state
    assert s.node == "after" and s.subflows == []
    assert s.variables == {"name": "Kim", "secret": "s3"} and s.extracted == {"mood": "calm"}
    assert s.state == {"sub": {"end": "yes", "state": {"sub_note": {"v": 7}, "answer": {"v": 1}}}}
    assert s.path[-3:] == ["sub.ask", "sub.yes", "after"]
    assert "Good, Kim." in [
        e.text for e in effects if isinstance(e, Say)
    ]  # the end node's greeting, in its values
    assert s.extracting == ["sub.ask#1"]  # its extraction still runs: the output lands when it answers
    call(ExtractionResult(node="sub.ask", id="sub.ask#1", values={"rating": 5}))
    assert call.state.extracted == {"mood": "calm", "rating": 5}


def test_an_extraction_of_the_callers_node_answering_inside_the_subflow_stays_the_callers() -> None:
    call = ef.Call(ef.engine(caller()))
    call(FunctionCalled(name="go_sub", at=ef.T0 + 1))
    assert call.state.node == "sub.ask"  # nothing it reads is being extracted: no wait
    call(ExtractionResult(node="start", id="start#1", values={"mood": "calm"}))
    assert call.state.extracted == {} and call.state.subflows[0].extracted == {"mood": "calm"}
    call.call("skip")
    assert call.state.node == "after" and call.state.extracted == {"mood": "calm"}
    assert call.state.state["sub"]["end"] == "no"


def test_a_hangup_inside_the_subflow_ends_with_the_callers_values() -> None:
    call = entered()
    call(ExtractionResult(node="start", id="start#1", values={"mood": "calm"}))
    call.call("sub_note", v=2)
    call(HangUp(at=ef.T0 + 5))
    s = call.state
    assert s.ended and s.end_reason == "user_hangup" and s.subflows == []
    assert s.variables == {"name": "Kim", "secret": "s3"}
    assert s.state == {"sub": {"end": None, "state": {"sub_note": {"v": 2}}}}


def test_a_way_of_the_calling_flow_taken_inside_the_subflow_abandons_it() -> None:
    data = caller()
    data["global_functions"] = [ef.go("to_bye", "bye")]
    call = ef.Call(ef.engine(data))
    call(FunctionCalled(name="go_sub", at=ef.T0 + 1))
    call.call("to_bye")
    assert call.state.node == "bye" and call.state.subflows == [] and call.state.variables["name"] == "Kim"
    assert call.state.state["sub"]["end"] is None


def test_an_input_of_the_wrong_type_at_run_time_is_said_and_the_default_used() -> None:
    data = caller(inputs={"who": "{{name}}", "tier": "{{n}}"})
    data["variables"]["n"] = {"type": "integer", "default": 4}
    call = ef.Call(ef.engine(data))
    effects = call(FunctionCalled(name="go_sub", at=ef.T0 + 1))
    assert call.state.variables == {"who": "Kim", "tier": "basic"}
    assert [e.reason for e in effects if isinstance(e, Rejected)] == [
        "subflow 'sub': input 'tier': expected string, got int"
    ]


@pytest.mark.parametrize("example", ["pharmacy_refill", "billing_enquiry"])
def test_changing_the_used_flow_changes_the_callers_definition(tmp_path: Path, example: str) -> None:
    """Content addressing: the caller's definition (what is published, and hashed into its
    version id) holds the subflow's content, so editing only the subflow gives another."""
    for name in (example, "verify_identity"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "flow.yaml").write_text((EXAMPLES / name / "flow.yaml").read_text())
    before = load_flow(tmp_path / example / "flow.yaml")
    sub = tmp_path / "verify_identity" / "flow.yaml"
    sub.write_text(sub.read_text().replace("that's you confirmed", "you're confirmed"))
    after = load_flow(tmp_path / example / "flow.yaml")
    assert before.subflows["verify"].digest != after.subflows["verify"].digest
    assert after.flow.nodes["verify.verified"].greeting == "Thank you, you're confirmed."
    assert before.model_dump_json() != after.model_dump_json()
