"""A template that is exactly one ``{{ref}}`` keeps the value's JSON type in an HTTP body.

The body is what an API receives: ``{"count": "{{count}}"}`` must send ``4``, not
``"4"``, and a boolean must stay a boolean (as text it reads "yes"). Everything else in
a body, and every header, is still text.
"""

from __future__ import annotations

from ringflow.callflow.effects import RunFunction
from ringflow.callflow.templating import render_json
from tests.support.engine_flows import Call, agent, end, engine, flow, go, http, only

VARIABLES = {
    "count": {"type": "integer"},
    "vip": {"type": "boolean"},
    "ratio": {"type": "number"},
    "tags": {"type": "array"},
    "who": {"type": "object"},
    "note": {"type": "string", "default": ""},
}
BODY = {
    "count": "{{count}}",
    "vip": "{{vip}}",
    "ratio": "{{ ratio }}",
    "tags": "{{tags}}",
    "who": "{{who}}",
    "name": "{{who.name}}",
    "first_tag": "{{tags.0}}",
    "text": "{{count}} seats, vip: {{vip}}",
    "empty": "{{note}}",
    "fallback": "{{note | none}}",
    "q": "{{q}}",
    "nested": [{"n": "{{count}}"}],
}


def test_a_single_reference_in_an_http_body_keeps_its_json_type() -> None:
    eng = engine(
        flow(
            {
                "a": agent(
                    http(
                        "order",
                        http={
                            "method": "POST",
                            "url": "https://api.test/o",
                            "headers": {"X-Count": "{{count}}"},
                            "body": BODY,
                        },
                    ),
                    go("done", "b"),
                ),
                "b": end(),
            },
            variables=VARIABLES,
        )
    )
    call = Call(eng, count=4, vip=True, ratio=0.5, tags=["a", "b"], who={"name": "Dana", "age": 40})
    run = only(call.call("order", q="x"), RunFunction)
    assert run.http is not None
    assert run.http.body == {
        "count": 4,
        "vip": True,
        "ratio": 0.5,
        "tags": ["a", "b"],
        "who": {"name": "Dana", "age": 40},
        "name": "Dana",
        "first_tag": "a",
        "text": "4 seats, vip: yes",
        "empty": "",
        "fallback": "none",
        "q": "x",
        "nested": [{"n": 4}],
    }
    assert run.http.headers == {"X-Count": "4"}  # a header is text


def test_a_missing_single_reference_is_null_or_its_fallback() -> None:
    assert render_json(
        {"a": "{{gone}}", "b": "{{gone | 7}}", "c": "{{state.x.y}}", "d": 3, "e": None}, {"state": {}}
    ) == {"a": None, "b": "7", "c": None, "d": 3, "e": None}
    assert render_json("{{zero}}", {"zero": 0}) == 0 and render_json("{{no}}", {"no": False}) is False
