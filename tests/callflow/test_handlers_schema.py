"""Tool schemas derived from handler code, their strict form, and finding handler modules."""

from __future__ import annotations

import copy
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, Optional

import jsonschema
import pytest

from ringflow import NO_RESPONSE, TRANSITION_IN_YAML
from ringflow.callflow.handler_api import FlowManager, function_options
from ringflow.callflow.handlers import HandlerModuleError, get_handler, handler_spec, load_module
from ringflow.callflow.loader import validate_file
from ringflow.callflow.schema import SignatureError, annotation_schema, drop_nulls, handler_schema, to_strict
from tests.support.paths import ROOT


# --- parameter types -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("annotation", "schema"),
    [
        (str, {"type": "string"}),
        (int, {"type": "integer"}),
        (float, {"type": "number"}),
        (bool, {"type": "boolean"}),
        (list[str], {"type": "array", "items": {"type": "string"}}),
        (list[int], {"type": "array", "items": {"type": "integer"}}),
        (list, {"type": "array", "items": {}}),
        (dict, {"type": "object"}),
        (dict[str, int], {"type": "object"}),
        (Optional[int], {"type": ["integer", "null"]}),  # noqa: UP045 - the old spelling must work too
        (int | None, {"type": ["integer", "null"]}),
        (Literal["a", "b"], {"enum": ["a", "b"], "type": "string"}),
        (Literal[1, 2, 3], {"enum": [1, 2, 3], "type": "integer"}),
        (Literal["a", 1], {"enum": ["a", 1]}),
        (Literal["x", "y"] | None, {"enum": ["x", "y", None], "type": ["string", "null"]}),
        (list[Literal["s", "m"]], {"type": "array", "items": {"enum": ["s", "m"], "type": "string"}}),
        (str | int, {"anyOf": [{"type": "string"}, {"type": "integer"}]}),
        (Any, {"type": "string"}),
    ],
)
def test_annotation_schema(annotation: Any, schema: dict[str, Any]) -> None:
    assert annotation_schema(annotation) == schema


@pytest.mark.parametrize("annotation", [set[int], bytes, FlowManager, tuple[int, int]])
def test_unsupported_annotation_says_what_is_supported(annotation: Any) -> None:
    with pytest.raises(SignatureError, match="use str, int, float, bool, list, dict, Optional or Literal"):
        annotation_schema(annotation)


# --- handler signatures and docstrings --------------------------------------------------------
async def book(
    flow_manager: FlowManager,
    time: str,
    party_size: int,
    budget: float = 50.0,
    vip: bool = False,
    tags: list[str] | None = None,
    notes: dict | None = None,
    seating: Literal["inside", "terrace"] = "inside",
):
    """Book a table.

    Only between 5 PM and 10 PM.

    Args:
        time (str): Requested time, "H:00 PM".
        party_size (int): Number of guests.
        budget (float): Budget per person.
        vip (bool): Whether the guest is a VIP.
        tags (list[str]): Free labels.
        notes (dict): Anything else.
        seating (str): Where to sit.
    """
    return {"status": "ok"}, TRANSITION_IN_YAML


def test_schema_from_signature_and_docstring() -> None:
    description, params = handler_schema(book)
    assert description == "Book a table. Only between 5 PM and 10 PM."
    assert params["type"] == "object"
    assert params["required"] == ["time", "party_size"]  # defaults make a parameter optional
    props = params["properties"]
    assert list(props) == ["time", "party_size", "budget", "vip", "tags", "notes", "seating"]
    assert props["time"] == {"type": "string", "description": 'Requested time, "H:00 PM".'}
    assert props["party_size"] == {"type": "integer", "description": "Number of guests."}
    assert props["budget"]["type"] == "number"
    assert props["vip"]["type"] == "boolean"
    assert props["tags"]["type"] == ["array", "null"] and props["tags"]["items"] == {"type": "string"}
    assert props["notes"]["type"] == ["object", "null"]
    assert props["seating"] == {
        "enum": ["inside", "terrace"],
        "type": "string",
        "description": "Where to sit.",
    }
    jsonschema.Draft202012Validator.check_schema(params)
    jsonschema.validate({"time": "7:00 PM", "party_size": 2, "seating": "terrace"}, params)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"time": "7:00 PM"}, params)


async def no_params(flow_manager: FlowManager):
    """Say hello."""
    return None, NO_RESPONSE


def test_handler_without_parameters() -> None:
    assert handler_schema(no_params) == ("Say hello.", {"type": "object", "properties": {}, "required": []})


async def _missing_doc_param(flow_manager: FlowManager, time: str, size: int):
    """Book.

    Args:
        time (str): When.
    """


async def _wrong_first(fm: FlowManager, time: str):
    """Book.

    Args:
        time (str): When.
    """


async def _no_first() -> None:
    """Book."""


def _not_async(flow_manager: FlowManager, time: str):
    """Book.

    Args:
        time (str): When.
    """


async def _no_docstring(flow_manager: FlowManager):
    pass


async def _var_args(flow_manager: FlowManager, *times: str):
    """Book.

    Args:
        times (str): When.
    """


async def _bad_hint(flow_manager: FlowManager, time: NoSuchType):  # type: ignore[name-defined]  # noqa: F821
    """Book.

    Args:
        time (NoSuchType): When.
    """


async def _async_gen(flow_manager: FlowManager):
    """Book."""
    yield 1


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (_missing_doc_param, "does not document parameter 'size'"),
        (_wrong_first, "first parameter must be named 'flow_manager'"),
        (_no_first, "first parameter must be named 'flow_manager'"),
        (_not_async, "must be an async function"),
        (_async_gen, "must be an async function"),
        (_no_docstring, "docstring needs a summary line"),
        (_var_args, "'*times'"),
        (_bad_hint, "cannot resolve type hints"),
    ],
)
def test_signature_errors(fn: Any, message: str) -> None:
    with pytest.raises(SignatureError, match=message.replace("*", r"\*")):
        handler_schema(fn)


def test_function_options_travel_in_the_spec_and_keep_the_function() -> None:
    @function_options(timeout_s=2.5, cancel_on_interruption=True)
    async def slow(flow_manager: FlowManager, q: str):
        """Slow lookup.

        Args:
            q (str): Query.
        """
        return {}, TRANSITION_IN_YAML

    spec = handler_spec(slow)
    assert spec.timeout_s == 2.5 and spec.cancel_on_interruption is True
    assert spec.parameters["required"] == ["q"]
    assert handler_spec(book).timeout_s is None
    with pytest.raises(ValueError):
        function_options(timeout_s=0)


# --- strict schemas -----------------------------------------------------------------------------
def test_strict_makes_every_property_required_and_optional_ones_nullable() -> None:
    schema = {
        "type": "object",
        "title": "ignored",
        "properties": {
            "size": {"type": "integer", "minimum": 1},
            "note": {"type": "string", "default": "none"},
            "kind": {"type": "string", "enum": ["a", "b"]},
            "address": {
                "type": "object",
                "properties": {"street": {"type": "string"}, "zip": {"type": "string"}},
                "required": ["street"],
            },
            "items": {
                "type": "array",
                "items": {"type": "object", "properties": {"sku": {"type": "string"}}},
            },
        },
        "required": ["size", "address"],
    }
    original = copy.deepcopy(schema)
    strict = to_strict(schema)
    assert schema == original  # the author's schema is left alone
    assert strict is not None
    assert strict["additionalProperties"] is False
    assert strict["required"] == ["size", "note", "kind", "address", "items"]
    assert "title" not in strict
    props = strict["properties"]
    assert props["size"] == {"type": "integer", "minimum": 1}
    assert props["note"] == {"type": ["string", "null"]}  # 'default' is not allowed in strict mode
    assert props["kind"] == {"type": ["string", "null"], "enum": ["a", "b", None]}
    address = props["address"]
    assert address["additionalProperties"] is False and address["required"] == ["street", "zip"]
    assert address["properties"]["zip"]["type"] == ["string", "null"]
    assert address["properties"]["street"]["type"] == "string"
    item = props["items"]["items"]
    assert item["additionalProperties"] is False and item["properties"]["sku"]["type"] == ["string", "null"]
    jsonschema.Draft202012Validator.check_schema(strict)
    jsonschema.validate(
        {"size": 2, "note": None, "kind": None, "address": {"street": "Main", "zip": None}, "items": None},
        strict,
    )


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object"},
        {"type": "object", "additionalProperties": True, "properties": {"a": {"type": "string"}}},
        {"type": "object", "additionalProperties": {"type": "string"}, "properties": {}},
        {"type": "object", "properties": {"meta": {"type": "object"}}},
        {"type": "object", "properties": {"tags": {"type": "array", "items": {}}}},
        {"type": "object", "properties": {"anything": True}},
        {"type": "object", "properties": {"list": {"type": "array", "items": True}}},
    ],
)
def test_free_form_objects_have_no_strict_form(schema: dict[str, Any]) -> None:
    assert to_strict(schema) is None


def test_strict_form_of_a_handler_schema() -> None:
    strict = to_strict(handler_schema(book)[1])
    assert strict is None  # ``notes: dict`` is free-form
    strict = to_strict(handler_schema(_strictable)[1])
    assert strict is not None
    assert strict["required"] == ["day", "count", "note"]
    assert strict["properties"]["note"]["type"] == ["string", "null"]
    assert strict["properties"]["day"]["enum"] == ["mon", "tue"]


async def _strictable(flow_manager: FlowManager, day: Literal["mon", "tue"], count: int, note: str = ""):
    """Pick a day.

    Args:
        day (str): The day.
        count (int): How many.
        note (str): A note.
    """


def test_drop_nulls_undoes_nullable_for_optional_properties_only() -> None:
    schema = {"type": "object", "properties": {"a": {}, "b": {}}, "required": ["a"]}
    assert drop_nulls({"a": None, "b": None}, schema) == {"a": None}
    assert drop_nulls({"a": 1, "b": 2}, schema) == {"a": 1, "b": 2}


# --- finding the handler module -------------------------------------------------------------------
HANDLER_TEMPLATE = '''
from ringflow import TRANSITION_IN_YAML, FlowManager

WHERE = "{where}"


async def {name}(flow_manager: FlowManager, value: str):
    """Handler from {where}.

    Args:
        value (str): Anything.
    """
    return {{"where": WHERE}}, TRANSITION_IN_YAML
'''

FLOW_TEMPLATE = """
flow: twin
handlers: {module}
nodes:
  start:
    task: Use the tool.
    functions:
      - name: {name}
      - {{name: finish, transition_only: true, description: Done., transition_to: done}}
  done:
    type: end
    task: Bye.
"""


@pytest.fixture
def module_name(request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"twin_handlers_{request.node.name.split('[')[0][-20:]}"
    yield name
    sys.modules.pop(name, None)


def _write(folder: Path, module: str, where: str, fn: str = "act") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{module}.py").write_text(HANDLER_TEMPLATE.format(where=where, name=fn))
    flow = folder / "flow.yaml"
    flow.write_text(FLOW_TEMPLATE.format(module=module, name=fn))
    return flow


def test_same_named_modules_in_two_folders_each_load_their_own(tmp_path: Path, module_name: str) -> None:
    a = load_module(module_name, _write(tmp_path / "a", module_name, "a").parent)
    b = load_module(module_name, _write(tmp_path / "b", module_name, "b").parent)
    assert (a.WHERE, b.WHERE) == ("a", "b")
    assert load_module(module_name, tmp_path / "a").WHERE == "a"  # and back again
    assert str(tmp_path / "a") not in sys.path and str(tmp_path / "b") not in sys.path


def test_same_named_modules_through_validation(tmp_path: Path, module_name: str) -> None:
    flow_a = _write(tmp_path / "a", module_name, "a", fn="only_in_a")
    flow_b = _write(tmp_path / "b", module_name, "b", fn="only_in_b")
    report_a, report_b = validate_file(flow_a), validate_file(flow_b)
    assert report_a.ok and report_b.ok, [*report_a.errors, *report_b.errors]
    assert report_a.definition and set(report_a.definition.handlers) == {"only_in_a"}
    assert report_b.definition and set(report_b.definition.handlers) == {"only_in_b"}
    assert report_a.definition.handlers["only_in_a"].description == "Handler from a."


def test_the_folder_of_the_flow_comes_before_the_import_path(
    tmp_path: Path, module_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path / "on_path", module_name, "sys.path")
    monkeypatch.syspath_prepend(str(tmp_path / "on_path"))
    beside = _write(tmp_path / "flow_dir", module_name, "beside").parent
    assert load_module(module_name, beside).WHERE == "beside"
    sys.modules.pop(module_name, None)
    assert load_module(module_name, tmp_path / "elsewhere").WHERE == "sys.path"  # nothing beside it
    sys.modules.pop(module_name, None)
    assert load_module(module_name, None).WHERE == "sys.path"


def test_a_package_beside_the_flow(tmp_path: Path, module_name: str) -> None:
    pkg = tmp_path / module_name
    pkg.mkdir()
    (pkg / "__init__.py").write_text(HANDLER_TEMPLATE.format(where="package", name="act"))
    assert load_module(module_name, tmp_path).WHERE == "package"


def test_module_errors_are_handler_module_errors(tmp_path: Path, module_name: str) -> None:
    with pytest.raises(HandlerModuleError, match="not found"):
        load_module("surely_no_module_called_this", tmp_path)
    (tmp_path / f"{module_name}.py").write_text("raise RuntimeError('boom at import')\n")
    with pytest.raises(HandlerModuleError, match="RuntimeError: boom at import"):
        load_module(module_name, tmp_path)
    (tmp_path / f"{module_name}.py").write_text("def broken(:\n")
    with pytest.raises(HandlerModuleError, match="SyntaxError"):
        load_module(module_name, tmp_path)
    for bad in ("", "a/b", "../x", "a..b", "x" * 300, "1abc", "a.b\n"):
        with pytest.raises(HandlerModuleError, match="not a dotted Python module name"):
            load_module(bad, tmp_path)


def test_get_handler_only_returns_callables(tmp_path: Path, module_name: str) -> None:
    mod = load_module(module_name, _write(tmp_path, module_name, "x").parent)
    assert get_handler(mod, "act") is not None
    assert get_handler(mod, "WHERE") is None
    assert get_handler(mod, "missing") is None


def test_examples_handlers_follow_the_contract() -> None:
    """Every handler named by an example is async, takes flow_manager and documents its arguments."""
    root = ROOT / "examples" / "flows"
    for flow in sorted(root.glob("*/flow.yaml")):
        report = validate_file(flow)
        assert report.definition is not None, report.errors
        for name, spec in report.definition.handlers.items():
            assert spec.description, name
            for prop, schema in spec.parameters["properties"].items():
                assert schema.get("description"), f"{flow.parent.name}.{name}({prop}) has no description"
        if report.definition.flow.handlers is None:  # a flow of captures and transitions only
            continue
        module = load_module(report.definition.flow.handlers, flow.parent)
        source = textwrap.dedent(Path(module.__file__ or "").read_text())
        assert "import requests" not in source and "httpx" not in source  # in-memory data only


def test_a_missing_dependency_is_not_reported_as_a_missing_module(tmp_path: Path, module_name: str) -> None:
    (tmp_path / f"{module_name}.py").write_text("import surely_not_installed_dependency\n")
    with pytest.raises(HandlerModuleError) as info:
        load_module(module_name, tmp_path)
    assert "importing" in str(info.value) and "surely_not_installed_dependency" in str(info.value)
    assert "beside the flow" not in str(info.value)
