"""NUL and lone surrogates (``callflow/safe_text.py``): named without the text, replaced by
U+FFFD wherever they are (keys too), and the engine replaces them in what its events carry,
so an agent that applies the raw event and a workflow that applies the one its intake
replaced hold the same state."""

from __future__ import annotations

from ringflow.callflow.engine import Engine
from ringflow.callflow.events import CallStarted
from ringflow.callflow.safe_text import find_unsafe, has_unsafe, scrub
from tests.support.wfkit import clinic


def test_found_named_and_replaced_everywhere() -> None:
    value = {"a": ["ok", {"b": "x\x00y"}], "k\ud800": 1}
    assert find_unsafe(value) == "a[1].b contains a NUL character (U+0000) at position 1"
    assert (
        find_unsafe({"k\ud800": 1}) == "a key of the value contains a lone surrogate (U+D800) at position 1"
    )
    assert scrub(value) == {"a": ["ok", {"b": "x\ufffdy"}], "k\ufffd": 1}
    assert has_unsafe(value) and not has_unsafe(scrub(value))
    clean = {"a": ["ok", {"b": "fine"}], "n": 1}
    assert scrub(clean) is clean and find_unsafe(clean) is None  # nothing copied when clean
    assert scrub("\U0001f600") == "\U0001f600"  # a paired surrogate is one code point: kept


def test_the_engine_holds_the_same_state_from_the_raw_event_and_the_replaced_one() -> None:
    engine = Engine(clinic())
    raw = CallStarted(call_id="c1", variables={"patient": "Al\x00ex\udc00"}, caller_number="+1555\x00")
    replaced = CallStarted.model_validate(scrub(raw.model_dump()))
    a, b = engine.start(raw).state, engine.start(replaced).state
    assert a == b and a.variables["patient"] == "Al\ufffdex\ufffd"
