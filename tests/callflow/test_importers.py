"""Importers: Dograh and Pipecat Flows files become Ringflow flows that validate.

The fixtures under tests/fixtures/import are written for these tests; each packs
the awkward cases of its format (code that cannot be carried, broken links, names
that are not identifiers) into one realistic file.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringflow.callflow.importers import SOURCES, FlowImportError, detect_source, import_flow, to_yaml
from ringflow.callflow.importers._common import Names, node_id
from tests.support.paths import ROOT, TESTS

FIXTURES = TESTS / "fixtures" / "import"
SHARED = ROOT.parent / "shared" / "fixtures" / "import"
SPEC_ORDER = [
    "flow",
    "version",
    "description",
    "role",
    "variables",
    "settings",
    "global_functions",
    "start",
    "nodes",
]


def load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def assert_valid(flow: dict[str, Any]) -> None:
    """The converted flow passes the real validator (imported here: it may not exist yet)."""
    try:
        from ringflow.callflow.loader import validate_data
    except ImportError:  # pragma: no cover - the validator lands separately
        return
    report = validate_data(copy.deepcopy(flow))
    assert report.errors == [], [str(e) for e in report.errors]


def warning_text(result: Any) -> str:
    return "\n".join(str(w) for w in result.warnings)


def fn(node: dict[str, Any], name: str) -> dict[str, Any]:
    return next(f for f in node.get("functions", []) if f["name"] == name)


# --- Dograh -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pizza() -> Any:
    # the fixture breaks Dograh's publish rules on purpose (an edge to a missing node...)
    return import_flow("dograh", load("dograh_pizza.json"), lenient=True)


def test_dograh_nodes_are_named_after_their_names_start_first(pizza: Any) -> None:
    flow = pizza.flow
    assert flow["flow"] == "tony_s_pizza_orders"
    assert list(flow["nodes"]) == ["welcome", "take_order", "complaint", "goodbye", "take_order_2"]
    assert "start" not in flow
    assert "same name" in warning_text(pizza) and "take_order_2" in warning_text(pizza)


def test_dograh_edges_become_transition_only_functions(pizza: Any) -> None:
    welcome = pizza.flow["nodes"]["welcome"]
    assert [f["name"] for f in welcome["functions"]] == ["order", "fn_2nd_complaint", "order_2"]
    order = fn(welcome, "order")
    assert order == {
        "name": "order",
        "transition_only": True,
        "description": "They want to place an order",
        "transition_to": "take_order",
        "speech": "Great, let's get your order started.",
    }
    assert fn(welcome, "order_2")["transition_to"] == "take_order_2"
    assert fn(pizza.flow["nodes"]["take_order"], "confirmed_order")["transition_to"] == "goodbye"
    # a label that is not text: named after the target, and reported
    assert fn(pizza.flow["nodes"]["take_order_2"], "to_goodbye")["transition_to"] == "goodbye"
    assert "edges[5]: edge f: label 42 is not text" in warning_text(pizza)


def test_dograh_node_settings_role_and_extraction(pizza: Any) -> None:
    flow = pizza.flow
    assert flow["role"].startswith("You are Tony's friendly order line.")
    welcome, take, bye = (flow["nodes"][n] for n in ("welcome", "take_order", "goodbye"))
    assert welcome["greeting"] == "Hi, thanks for calling {{store_name}}!"
    assert welcome["allow_interrupt"] is False
    assert bye == {
        "type": "end",
        "task": "Tell them the pizza is on its way and say goodbye.",
        "add_role": False,
    }
    assert take["extract"] == [
        {"name": "pizza_count", "type": "number", "description": "How many pizzas"},
        {"name": "wants_drinks", "type": "boolean", "description": "Whether they want drinks"},
        {"name": "delivery_time", "type": "string", "description": "When to deliver"},
    ]
    assert "'delivery_time' has type datetime; imported as a string" in warning_text(pizza)
    assert "tools not carried" in warning_text(pizza)


def test_dograh_templates_become_declared_variables(pizza: Any) -> None:
    flow = pizza.flow
    assert flow["nodes"]["welcome"]["task"].startswith("Welcome {{customer_name}} to {{store_name}}")
    assert flow["variables"]["store_name"] == {"type": "string", "default": "Tony's Pizza"}
    assert flow["variables"]["customer_name"]["type"] == "string"
    assert "template variable 'customer_name'" in warning_text(pizza)


def test_dograh_reports_what_it_cannot_carry(pizza: Any) -> None:
    text = warning_text(pizza)
    assert "workflow_definition.nodes[5]: node 'Order QA' (id 6, type qa) not carried" in text
    assert "workflow_definition.nodes[6]: node 'API trigger' (id 7, type trigger) not carried" in text
    assert "workflow_definition.edges[4]: edge e from 2 to 99 not carried" in text
    assert "workflow_definition.edges[6]: edge g from 1 to 6 not carried: 6 is a qa node" in text


def test_dograh_node_without_way_out_becomes_end(pizza: Any) -> None:
    assert pizza.flow["nodes"]["complaint"]["type"] == "end"
    assert "node 'complaint' has no transition towards an end; imported as an end node" in warning_text(pizza)


def test_dograh_fixture_validates(pizza: Any) -> None:
    assert_valid(pizza.flow)


def _graph(nodes: list[Any], edges: list[Any]) -> dict[str, Any]:
    return {"nodes": nodes, "edges": edges}


def _node(nid: str, kind: str, name: str, **data: Any) -> dict[str, Any]:
    return {"id": nid, "type": kind, "data": {"name": name, "prompt": f"Do {name}.", **data}}


def _edge(src: str, dst: str, lbl: Any = "next") -> dict[str, Any]:
    return {
        "id": f"{src}-{dst}",
        "source": src,
        "target": dst,
        "data": {"label": lbl, "condition": f"Time for {dst}."},
    }


def test_dograh_bare_graph_webhook_named_in_warning() -> None:
    data = _graph(
        [
            _node("a", "startCall", "Hello"),
            _node("b", "endCall", "Bye"),
            {"id": "w", "type": "webhook", "data": {"name": "Notify CRM"}},
        ],
        [_edge("a", "b", "Done")],
    )
    result = import_flow("dograh", data)
    assert result.flow["flow"] == "imported"
    assert "nodes[2]: node 'Notify CRM' (id w, type webhook) not carried" in warning_text(result)
    assert_valid(result.flow)


def test_dograh_cycle_without_exit_gets_an_end_node() -> None:
    data = _graph(
        [_node("a", "startCall", "Ping"), _node("b", "agentNode", "Pong")],
        [_edge("a", "b", "go"), _edge("b", "a", "back")],
    )
    result = import_flow("dograh", data, lenient=True)
    nodes = result.flow["nodes"]
    assert nodes["end_call"]["type"] == "end"
    assert fn(nodes["ping"], "end_call")["transition_to"] == "end_call"
    assert fn(nodes["pong"], "end_call")["transition_to"] == "end_call"
    assert "cannot reach an end node" in warning_text(result)
    assert_valid(result.flow)


def test_dograh_end_node_keeps_no_transition() -> None:
    data = _graph(
        [_node("a", "startCall", "Hi"), _node("b", "endCall", "Bye")],
        [_edge("a", "b", "done"), _edge("b", "a", "again")],
    )
    result = import_flow("dograh", data, lenient=True)
    assert "functions" not in result.flow["nodes"]["bye"]
    assert "end node 'bye': transition 'again' is not carried" in warning_text(result)
    assert_valid(result.flow)


# --- Pipecat Flows editor -----------------------------------------------------------


@pytest.fixture(scope="module")
def clinic() -> Any:
    # the fixture has a function into a node that does not exist on purpose (go_nowhere)
    return import_flow("pipecat", load("pipecat_editor_clinic.json"), lenient=True)


def test_pipecat_functions_into_missing_nodes_are_refused_unless_lenient() -> None:
    """Pipecat Flows fails when the LLM calls such a function; a warning and exit 0 hid it."""
    with pytest.raises(FlowImportError) as err:
        import_flow("pipecat", load("pipecat_editor_clinic.json"))
    text = str(err.value)
    assert "--lenient imports it anyway" in text
    where = "nodes[1].data.functions[1]: node 'pick_slot'"
    assert f"{where}: function 'go_nowhere' goes to unknown node no_such_node" in text
    legacy = {
        "initial_node": "greet",
        "nodes": {
            "greet": {
                "task_messages": [{"role": "system", "content": "Greet."}],
                "functions": [
                    {
                        "type": "function",
                        "function": {"name": "onward", "description": "Go.", "transition_to": "gone"},
                    },
                    {
                        "type": "function",
                        "function": {"name": "finish", "description": "End.", "transition_to": "bye"},
                    },
                ],
            },
            "bye": {
                "task_messages": [{"role": "system", "content": "Bye."}],
                "post_actions": [{"type": "end_conversation"}],
            },
        },
    }
    with pytest.raises(FlowImportError, match="function 'onward' goes to unknown node gone"):
        import_flow("pipecat-legacy", legacy)
    kept = import_flow("pipecat-legacy", legacy, lenient=True)
    assert "function 'onward' goes to unknown node gone" in warning_text(kept)
    assert fn(kept.flow["nodes"]["greet"], "finish")["transition_to"] == "bye"
    assert "transition_to" not in fn(kept.flow["nodes"]["greet"], "onward")
    decided = load("pipecat_editor_clinic.json")
    data = decided["nodes"][0]["data"]["functions"][0]
    data["decision"]["conditions"][0]["next_node_id"] = "vanished"
    with pytest.raises(FlowImportError, match="decides to go to unknown node vanished"):
        import_flow("pipecat", decided, lenient=False)


def test_pipecat_editor_roles_tasks_and_ids(clinic: Any) -> None:
    flow = clinic.flow
    assert flow["flow"] == "clinic_reschedule"
    assert flow["description"] == "Reschedule an appointment"
    assert flow["role"] == "You are Robin, scheduling assistant at {{clinic}}."
    assert list(flow["nodes"]) == ["start_here", "pick_slot", "handoff", "done", "mystery"]
    start = flow["nodes"]["start_here"]
    assert start["task"] == (
        "Ask for the patient's date of birth.\n\nDo not share details before verification."
    )
    assert start["respond_immediately"] is False
    pick = flow["nodes"]["pick_slot"]
    assert pick["task"].startswith("You are a terse booking robot.\n\nOffer up to")
    assert pick["add_role"] is False
    assert pick["context"] == "reset_with_summary"
    assert flow["variables"] == {
        "clinic": {"type": "string", "default": "Riverside Clinic"},
        "max_slots": {"type": "integer", "default": 3},
    }
    assert "node 'Start-Here' renamed 'start_here'" in warning_text(clinic)
    assert "node 'mystery' has unknown type wormhole" in warning_text(clinic)


def test_pipecat_editor_functions_and_globals(clinic: Any) -> None:
    flow = clinic.flow
    talk, opt_out = flow["global_functions"]
    assert talk == {
        "name": "talk_to_human",
        "transition_only": True,
        "description": "The caller asks for a person",
        "transition_to": "handoff",
    }
    assert opt_out["capture"] is True
    assert opt_out["parameters"] == {"type": "object", "properties": {}}
    book = fn(flow["nodes"]["pick_slot"], "book")
    assert book["capture"] is True and book["transition_to"] == "done"
    # 'str' is mapped to 'string', a bare string schema replaced; unknown required names dropped
    assert book["parameters"] == {
        "type": "object",
        "required": ["slot"],
        "properties": {"slot": {"type": "string"}, "notes": {"type": "string"}},
    }
    assert "argument 'notes' has no valid JSON Schema" in warning_text(clinic)
    nowhere = fn(flow["nodes"]["pick_slot"], "go_nowhere")
    assert "transition_to" not in nowhere and nowhere["capture"] is True
    assert "goes to unknown node no_such_node" in warning_text(clinic)


def test_pipecat_editor_decision_becomes_llm_transitions(clinic: Any) -> None:
    start = clinic.flow["nodes"]["start_here"]
    verify = fn(start, "verify_dob")
    assert verify["capture"] is True and "transition_to" not in verify
    assert fn(start, "verify_dob_to_pick_slot")["transition_to"] == "pick_slot"
    assert fn(start, "verify_dob_to_handoff")["transition_to"] == "handoff"
    assert (
        "nodes[0].data.functions[0].decision: node 'start_here': function 'verify_dob' has a "
        "decision (Python code) that is not carried" in warning_text(clinic)
    )


def test_pipecat_editor_actions(clinic: Any) -> None:
    nodes = clinic.flow["nodes"]
    assert nodes["pick_slot"]["pre_actions"] == [{"tts_say": "One moment while I check."}]
    assert "post_actions" not in nodes["pick_slot"]
    assert nodes["handoff"]["post_actions"] == [{"end_conversation": "Goodbye for now."}]
    assert nodes["done"]["post_actions"] == [{"end_conversation": ""}]
    text = warning_text(clinic)
    assert "pre_actions[0]: node 'pick_slot': action of type function (handler load_slots)" in text
    assert "post_actions[0]: node 'pick_slot': action of type play_sound not carried" in text
    assert "summary_prompt not carried" in text
    assert "setting 'color' not carried" in text
    assert "end node 'handoff': transition 'back_to_start' is not carried" in text
    assert "edges[2]: edge e3 from done to mystery is not backed" in text


def test_pipecat_editor_fixture_validates(clinic: Any) -> None:
    assert_valid(clinic.flow)


# --- Pipecat legacy FlowConfig ------------------------------------------------------


@pytest.fixture(scope="module")
def bank() -> Any:
    return import_flow("pipecat-legacy", load("pipecat_legacy_bank.json"), name="Northbank Line")


def test_pipecat_legacy_provider_formats(bank: Any) -> None:
    flow = bank.flow
    assert flow["flow"] == "northbank_line"
    assert flow["role"] == "You are the Northbank phone assistant."
    greet = flow["nodes"]["greet"]
    assert [f["name"] for f in greet["functions"]] == ["balance", "lost_card", "branch_hours", "smart_route"]
    balance = fn(greet, "balance")
    assert balance["capture"] is True and balance["transition_to"] == "balance"
    assert balance["parameters"]["required"] == ["account_last4"]
    assert fn(greet, "lost_card") == {
        "name": "lost_card",
        "transition_only": True,
        "description": "They lost their card",
        "transition_to": "lost_card",
    }
    assert fn(greet, "branch_hours")["transition_to"] == "hours"
    assert "transition_to" not in fn(greet, "smart_route")
    text = warning_text(bank)
    assert "nodes.Greet.functions[0].function: node 'greet': function 'balance' handler" in text
    assert "function 'smart_route' transition callback" in text


def test_pipecat_legacy_end_nodes_and_settings(bank: Any) -> None:
    nodes = bank.flow["nodes"]
    assert next(iter(nodes)) == "greet"
    assert nodes["end"]["type"] == "end"
    assert nodes["end"]["post_actions"] == [{"end_conversation": ""}]
    assert nodes["lost_card"]["type"] == "end"
    assert nodes["lost_card"]["pre_actions"] == [{"tts_say": "I'm sorry to hear that."}]
    assert "node 'lost_card' has no transition towards an end" in warning_text(bank)
    assert nodes["balance"]["context"] == "reset"
    assert nodes["hours"]["task"] == "Branches open 9 to 5 on weekdays."


def test_pipecat_legacy_fixture_validates(bank: Any) -> None:
    assert_valid(bank.flow)


def test_pipecat_legacy_unknown_initial_node_warns() -> None:
    data = {
        "initial_node": "nope",
        "nodes": {
            "only": {
                "task_messages": [{"role": "system", "content": "Say hi."}],
                "post_actions": [{"type": "end_conversation"}],
            }
        },
    }
    result = import_flow("pipecat-legacy", data)
    assert result.flow["nodes"]["only"]["type"] == "end"
    assert "initial_node nope names no node" in warning_text(result)
    assert_valid(result.flow)


# --- YAML output, detection ---------------------------------------------------------


def test_to_yaml_is_readable_and_round_trips(clinic: Any, pizza: Any) -> None:
    for flow in (clinic.flow, pizza.flow):
        text = to_yaml(flow)
        assert yaml.safe_load(text) == flow
        assert list(flow) == [k for k in SPEC_ORDER if k in flow]
        assert "&id" not in text and "*id" not in text
    assert "task: |" in to_yaml(clinic.flow)


def test_to_yaml_repeated_objects_are_not_aliased() -> None:
    shared = {"type": "object", "properties": {}}
    text = to_yaml({"flow": "x", "a": shared, "b": shared, "name": "Zoë"})
    assert "&" not in text and "Zoë" in text


@pytest.mark.parametrize(
    ("fixture", "source"),
    [
        ("dograh_pizza.json", "dograh"),
        ("pipecat_editor_clinic.json", "pipecat"),
        ("pipecat_legacy_bank.json", "pipecat-legacy"),
    ],
)
def test_detect_source(fixture: str, source: str) -> None:
    assert detect_source(load(fixture)) == source


def test_detect_source_bare_dograh_graph_and_garbage() -> None:
    assert detect_source(load("dograh_pizza.json")["workflow_definition"]) == "dograh"
    assert detect_source([1]) is None
    assert detect_source({"nodes": "x"}) is None


# --- malformed input ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "data"),
    [
        ("dograh", []),
        ("dograh", "nodes"),
        ("dograh", {}),
        ("dograh", {"nodes": {}}),
        ("dograh", {"workflow_definition": "x"}),
        ("dograh", {"workflow_definition": {"edges": []}}),
        ("dograh", {"nodes": [{"id": "1", "type": "webhook", "data": {"name": "Hook"}}], "edges": []}),
        ("dograh", {"nodes": [1, None, "x"]}),
        ("pipecat", [1, 2]),
        ("pipecat", {"meta": {"name": "x"}}),
        ("pipecat", {"nodes": {}}),
        ("pipecat", {"nodes": [None, {"type": "initial"}]}),
        ("pipecat-legacy", None),
        ("pipecat-legacy", {"initial_node": "a", "nodes": []}),
        ("pipecat-legacy", {"nodes": {}}),
        ("vapi", {"nodes": []}),
        (["dograh"], {"nodes": []}),
    ],
)
def test_not_a_flow_of_that_kind(source: str, data: Any) -> None:
    with pytest.raises(FlowImportError):
        import_flow(source, data)


def test_absurd_nesting_is_refused() -> None:
    deep: Any = "x"
    for _ in range(100):
        deep = [deep]
    with pytest.raises(FlowImportError, match="nested deeper"):
        import_flow("pipecat", {"nodes": deep})


def test_broken_parts_become_warnings() -> None:
    data = {
        "nodes": [
            _node("1", "startCall", "Start"),
            7,
            {"id": "1", "type": "agentNode", "data": {}},
            {
                "id": "2",
                "type": "agentNode",
                "data": {"name": "Mid", "prompt": 5, "extraction_variables": "x"},
            },
            {"id": "3", "type": "mystery", "data": {"name": "Odd"}},
        ],
        "edges": [3, _edge("1", "2", ["list"]), _edge("1", "2", "!!!"), _edge("2", "3"), {"source": "1"}],
    }
    result = import_flow("dograh", data, lenient=True)
    text = warning_text(result)
    assert "nodes[1]: node is int" in text
    assert "missing or repeated id" in text
    assert "node 'Odd' (id 3, type mystery) not carried: unknown node type" in text
    assert "extraction_variables is not a list" in text
    assert [f["name"] for f in result.flow["nodes"]["start"]["functions"]] == ["to_mid", "to_mid_2"]
    assert_valid(result.flow)


# --- any JSON: FlowImportError or a flow that validates ----------------------------

_leaf = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12)
json_values = st.recursive(
    _leaf,
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=25,
)
prose = st.lists(
    st.sampled_from(
        [
            "Hi ",
            "{{",
            "}}",
            "{{name}}",
            "{{a.b | x}}",
            "{{ 1+2 }}",
            "{",
            "\n",
            "x",
            "{{state.q}}",
            "{{call_id}}",
        ]
    ),
    max_size=6,
).map("".join) | st.text(max_size=12)


def _mostly(values: list[Any]) -> Any:
    known = st.sampled_from(values)
    return st.one_of(known, known, known, _leaf)


ids = _mostly(["1", "2", "3", "Start", "end", "9"])
word = _mostly(["Go", "go", "2go", "", "Done!", "x y"]) | st.text(max_size=8)


def _maybe(d: dict[str, Any]) -> Any:
    """Mostly the expected shape, sometimes anything at all."""
    shaped = st.fixed_dictionaries({}, optional=d)
    return st.one_of(shaped, shaped, shaped, json_values)


dograh_node = st.fixed_dictionaries(
    {
        "id": ids,
        "type": _mostly(["startCall", "agentNode", "endCall", "globalNode", "webhook", "qa", "x"])
        | json_values,
    },
    optional={
        "data": _maybe(
            {
                "name": word,
                "prompt": prose,
                "greeting": prose,
                "allow_interrupt": _leaf,
                "add_global_prompt": _leaf,
                "extraction_variables": st.lists(
                    _maybe({"name": word, "type": word, "prompt": prose}), max_size=3
                ),
            }
        )
    },
)
edge = st.fixed_dictionaries(
    {"source": ids, "target": ids},
    optional={"data": _maybe({"label": word, "condition": prose, "transition_speech": prose})},
)
dograh_doc = st.fixed_dictionaries(
    {"nodes": st.lists(st.one_of(dograh_node, dograh_node, json_values), min_size=2, max_size=6)},
    optional={"edges": st.lists(edge, max_size=8) | json_values, "name": word},
)
function = _maybe(
    {
        "name": word,
        "description": prose,
        "next_node_id": ids,
        "transition_to": ids,
        "properties": _maybe({"a": json_values, "b": _maybe({"type": word})}),
        "required": json_values,
        "decision": _maybe(
            {
                "conditions": st.lists(_maybe({"next_node_id": ids}), max_size=2) | json_values,
                "default_next_node_id": ids,
            }
        ),
        "handler": _leaf,
    }
)
messages = st.lists(_maybe({"role": word, "content": prose}), max_size=2) | json_values
node_data = _maybe(
    {
        "task_messages": messages,
        "role_messages": messages,
        "role_message": prose | json_values,
        "functions": st.lists(function, max_size=3) | json_values,
        "pre_actions": st.lists(_maybe({"type": word, "text": prose}), max_size=2),
        "post_actions": st.lists(_maybe({"type": st.just("end_conversation")}), max_size=2),
        "context_strategy": json_values,
    }
)
editor_doc = st.fixed_dictionaries(
    {
        "nodes": st.lists(
            st.fixed_dictionaries(
                {"id": ids, "type": _mostly(["initial", "node", "end", "x"]) | json_values},
                optional={"data": node_data},
            )
            | json_values,
            min_size=2,
            max_size=5,
        )
    },
    optional={
        "global_functions": st.lists(function, max_size=2) | json_values,
        "meta": json_values,
        "context": json_values,
        "edges": st.lists(edge, max_size=3),
    },
)
legacy_doc = st.fixed_dictionaries(
    {"nodes": st.dictionaries(ids.map(str), node_data, max_size=5)},
    optional={"initial_node": ids, "global_functions": st.lists(function, max_size=2) | json_values},
)


@st.composite
def graphs(draw: Any, source: str) -> tuple[str, Any]:
    """Well-formed node lists with random wiring: cycles, sinks, edges out of end nodes."""
    n = draw(st.integers(1, 6))
    keys = [f"n{i}" for i in range(n)]
    kinds = {
        "dograh": ["startCall", "agentNode", "agentNode", "endCall"],
        "pipecat": ["initial", "node", "node", "end"],
        "pipecat-legacy": ["node"],
    }[source]
    types = [draw(st.sampled_from(kinds)) for _ in keys]
    names = [draw(st.sampled_from(["Ask", "ask", "Ask!", "1st", "Check", "End"])) for _ in keys]
    links = draw(
        st.lists(
            st.tuples(
                st.sampled_from(keys), st.sampled_from(keys), st.sampled_from(["Yes", "yes", "No", "", "9"])
            ),
            max_size=10,
        )
    )
    if source == "dograh":
        nodes = [
            {"id": k, "type": t, "data": {"name": nm, "prompt": f"Handle {nm}."}}
            for k, t, nm in zip(keys, types, names, strict=True)
        ]
        edges = [
            {"id": f"e{i}", "source": a, "target": b, "data": {"label": lb}}
            for i, (a, b, lb) in enumerate(links)
        ]
        return source, {"name": "Random", "workflow_definition": {"nodes": nodes, "edges": edges}}
    funcs: dict[str, list[dict[str, Any]]] = {k: [] for k in keys}
    for a, b, lb in links:
        if source == "pipecat-legacy" and draw(st.booleans()):  # the early convention: named after b
            funcs[a].append({"name": b, "description": "Move."})
            continue
        funcs[a].append({"name": lb or "go", "description": "Move.", "next_node_id": b, "transition_to": b})
    task = [{"role": "system", "content": "Do it."}]
    if source == "pipecat":
        return source, {
            "meta": {"name": "r"},
            "nodes": [
                {"id": k, "type": t, "data": {"task_messages": task, "functions": funcs[k]}}
                for k, t in zip(keys, types, strict=True)
            ],
        }
    return source, {
        "initial_node": keys[0],
        "nodes": {k: {"task_messages": task, "functions": funcs[k]} for k in keys},
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(source=st.sampled_from(SOURCES), data=json_values)
def test_any_json_value(source: str, data: Any) -> None:
    _import_or_refuse(source, data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.one_of(
        dograh_doc.map(lambda d: ("dograh", d)),
        editor_doc.map(lambda d: ("pipecat", d)),
        legacy_doc.map(lambda d: ("pipecat-legacy", d)),
        st.sampled_from(SOURCES).flatmap(graphs),
    )
)
def test_near_valid_documents(data: tuple[str, Any]) -> None:
    _import_or_refuse(*data)


def _import_or_refuse(source: str, data: Any) -> None:
    before = copy.deepcopy(data)
    try:
        result = import_flow(source, data, lenient=True)
    except FlowImportError:
        return
    assert data == before  # pure: the input is not modified
    try:  # without lenient: refused (Dograh's publish rules, a Pipecat function into a
        # node that does not exist), or the very same flow
        assert import_flow(source, copy.deepcopy(data)).flow == result.flow
    except FlowImportError as exc:
        assert source == "dograh" or "goes to unknown node" in str(exc), exc
    assert all(w.severity == "warning" for w in result.warnings)
    assert_valid(result.flow)
    assert yaml.safe_load(to_yaml(result.flow)) == result.flow


# --- the project's shared fixtures, when this checkout sits beside them -------------


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared fixtures not present")
@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("dograh_dental.json", "dograh"),
        ("pipecat_editor_survey.json", "pipecat"),
        ("pipecat_legacy_movies.json", "pipecat-legacy"),
    ],
)
def test_shared_fixtures_validate(name: str, source: str) -> None:
    data = json.loads((SHARED / name).read_text())
    assert detect_source(data) == source
    result = import_flow(source, data)  # Dograh's publish rules hold for the shared fixture
    assert_valid(result.flow)
    if source == "dograh":
        assert any("webhook" in w.message for w in result.warnings)


def _links(source: str, doc: Any) -> set[tuple[str, str]]:
    """The source's edges that Ringflow can carry: all but those out of end nodes."""
    if source == "dograh":
        graph = doc["workflow_definition"]
        ends = {n["id"] for n in graph["nodes"] if n["type"] == "endCall"}
        return {(e["source"], e["target"]) for e in graph["edges"] if e["source"] not in ends}
    if source == "pipecat":
        return {
            (n["id"], f["next_node_id"])
            for n in doc["nodes"]
            if n["type"] != "end"
            for f in n["data"]["functions"]
        }
    return {(k, f.get("transition_to", f["name"])) for k, n in doc["nodes"].items() for f in n["functions"]}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.sampled_from(SOURCES).flatmap(graphs))
def test_every_edge_is_kept(data: tuple[str, Any]) -> None:
    source, doc = data
    result = import_flow(source, doc, lenient=True)
    kept = {
        (nid, f["transition_to"])
        for nid, node in result.flow["nodes"].items()
        for f in node.get("functions", [])
        if isinstance(f.get("transition_to"), str)
    }
    want = _links(source, doc)
    if source == "dograh":  # node ids come from the nodes' names, made unique in order
        taken = Names()
        ids = {n["id"]: taken.claim(node_id(n["data"]["name"])) for n in doc["workflow_definition"]["nodes"]}
        want = {(ids[a], ids[b]) for a, b in want}
    assert want <= kept, (want - kept, [str(w) for w in result.warnings])
