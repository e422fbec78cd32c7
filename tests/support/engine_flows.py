"""Flows, a call driver and hypothesis strategies for the engine tests.

Every flow is built as plain data and goes through ``validate_data``, so the engine is
only ever tested on flows a user could actually load, never on shapes the validator
would refuse (an invalid test flow fails loudly instead of testing nothing).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from ringflow.callflow.effects import Effect
from ringflow.callflow.engine import Engine
from ringflow.callflow.events import (
    CallStarted,
    ExtractionResult,
    FunctionCalled,
    FunctionResult,
    HangUp,
    MaxDuration,
    UserIdle,
    UserSpoke,
)
from ringflow.callflow.loader import validate_data
from ringflow.callflow.model import FlowDefinition
from ringflow.callflow.state import CallState
from tests.support.paths import TESTS

FIXTURES = TESTS / "fixtures" / "engine"
HANDLERS = "engine_handlers"  # tests/fixtures/engine/engine_handlers.py
T0 = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC

Data = dict[str, Any]


# --- building flows ----------------------------------------------------------------------
def build(data: Data) -> FlowDefinition:
    report = validate_data(data, base_dir=FIXTURES, source="engine-test")
    if report.definition is None:
        raise AssertionError("invalid test flow: " + "; ".join(str(e) for e in report.errors))
    return report.definition


def engine(data: Data) -> Engine:
    return Engine(build(data))


def flow(nodes: Data, **top: Any) -> Data:
    return {"flow": "t", **top, "nodes": nodes}


def go(name: str, to: str, description: str = "Move on.", **kw: Any) -> Data:
    return {"name": name, "transition_only": True, "description": description, "transition_to": to, **kw}


def capture(name: str, properties: Data | None = None, required: list[str] | None = None, **kw: Any) -> Data:
    props = properties if properties is not None else {"v": {"type": "integer"}}
    params = {
        "type": "object",
        "properties": props,
        "required": list(props) if required is None else required,
    }
    return {"name": name, "capture": True, "description": "Record it.", "parameters": params, **kw}


def http(name: str, **kw: Any) -> Data:
    return {
        "name": name,
        "description": "Ask the API.",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        "http": {"method": "POST", "url": "https://api.test/{{q}}"},
        **kw,
    }


def table(cases: Data, default: str | None = None, field: str = "status") -> Data:
    out: Data = {"field": field, "cases": cases}
    if default is not None:
        out["default"] = default
    return out


def agent(*functions: Data, task: str = "Help the caller.", **kw: Any) -> Data:
    return {"task": task, "functions": list(functions), **kw}


def end(task: str = "Say goodbye.", **kw: Any) -> Data:
    return {"type": "end", "task": task, **kw}


def gate(branches: list[tuple[Data, str]], default: str) -> Data:
    return {"type": "gate", "branches": [{"when": w, "to": to} for w, to in branches], "default": default}


def action(run: Data, transition_to: Any, **kw: Any) -> Data:
    return {"type": "action", "run": run, "transition_to": transition_to, **kw}


# --- flows shared by several tests ----------------------------------------------------------
CLINIC_VARS = {
    "first_name": {"type": "string", "required": True},
    "clinic": {"type": "string", "default": "Northside"},
}


def clinic(**settings: Any) -> Engine:
    """The workhorse flow: every kind of function entry on one node, globals, an end."""
    return engine(
        flow(
            {
                "greet": agent(
                    go("to_book", "book", "Book for {{first_name}}.", speech="One moment, {{first_name}}."),
                    capture(
                        "note", {"text": {"type": "string"}, "size": {"type": "integer"}}, required=["text"]
                    ),
                    {"name": "lookup"},
                    {"name": "check"},
                    http("find", transition_to=table({"yes": "book"})),
                    task="Greet {{first_name}} ({{current_date}} {{current_time}}, call {{call_id}}, "
                    "from {{caller_number}}, order {{state.order.size | unknown}}).",
                    greeting="Hello {{first_name}}!",
                    extract=[{"name": "mood", "enum": ["happy", "sad"]}, {"name": "age", "type": "integer"}],
                ),
                "book": agent(
                    go("done", "bye"), go("again", "book"), task="Book it.", add_role=False, context="reset"
                ),
                "bye": end(
                    functions=[capture("rate", {"stars": {"type": "integer"}})],
                    disposition="booked",
                    extract=[{"name": "rating", "type": "integer"}],
                ),
            },
            role="You are Ava for {{clinic}}.",
            variables=CLINIC_VARS,
            handlers=HANDLERS,
            settings=settings,
            global_functions=[go("human", "bye", "Wants a human."), capture("complain")],
        )
    )


def gated() -> Engine:
    """Gates chained into an action: no LLM between the capture and the end."""
    return engine(
        flow(
            {
                "ask": agent(capture("order", {"total": {"type": "number"}}, transition_to="route")),
                "route": gate(
                    [
                        ({"var": "state.order.total", "op": ">=", "value": 100}, "big"),
                        (
                            {
                                "any": [
                                    {"var": "vip", "op": "==", "value": True},
                                    {"var": "mood", "op": "exists"},
                                ]
                            },
                            "check",
                        ),
                    ],
                    default="small",
                ),
                "check": gate(
                    [({"var": "state.order.total", "op": ">", "value": 50}, "big")], default="fetch"
                ),
                "fetch": action({"name": "check"}, table({"found": "big", "error": "small"}), save_as="rec"),
                "big": end(disposition="big"),
                "small": end(disposition="small"),
            },
            handlers=HANDLERS,
            variables={"vip": {"type": "boolean", "default": False}, "mood": {"type": "string"}},
        )
    )


# --- driving a call ----------------------------------------------------------------------
class Call:
    """Holds the current state; each event returns the effects it produced."""

    def __init__(self, eng: Engine, at: float = T0, **variables: Any) -> None:
        self.eng = eng
        step = eng.start(CallStarted(call_id="c1", variables=variables, caller_number="+15550100", at=at))
        self.state: CallState = step.state
        self.effects: list[Effect] = step.effects

    def __call__(self, event: Any) -> list[Effect]:
        step = self.eng.apply(self.state, event)
        self.state, self.effects = step.state, step.effects
        return step.effects

    def call(self, name: str, **args: Any) -> list[Effect]:
        return self(FunctionCalled(name=name, args=args))

    def result(self, result: Any = None, run_id: int | None = None, **kw: Any) -> list[Effect]:
        rid = run_id if run_id is not None else max(int(k) for k in self.state.pending)
        return self(FunctionResult(run_id=rid, result=result, **kw))


def kinds(effects: list[Effect]) -> list[str]:
    return [e.type for e in effects]


def only(effects: list[Effect], kind: type) -> Any:
    found = [e for e in effects if isinstance(e, kind)]
    assert len(found) == 1, f"expected one {kind.__name__} in {kinds(effects)}"
    return found[0]


# --- hypothesis: random valid flows ----------------------------------------------------------
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.text(max_size=6)
    | st.floats(allow_nan=False, allow_infinity=False)
)
json_values = st.recursive(
    json_scalars,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
    max_leaves=8,
)
VARS = ["tier", "n", "state.score", "state.x_cap.v", "missing.path"]
OPS = ["==", "!=", "<", "<=", ">", ">=", "in", "not_in", "contains", "exists", "not_exists"]
leaf = st.builds(
    lambda var, op, value: {"var": var, "op": op, "value": value},
    st.sampled_from(VARS),
    st.sampled_from(OPS),
    st.sampled_from([3, "gold", True, None, [1, 3, "gold"], "o", 2.5]),
)
conditions = st.recursive(
    leaf,
    lambda c: st.builds(
        lambda k, xs: {k: xs}, st.sampled_from(["all", "any"]), st.lists(c, min_size=1, max_size=2)
    ),
    max_leaves=3,
)
CASES = ["ok", "true", "1", "missing"]


@st.composite
def flows(draw: st.DrawFn) -> Data:
    """A random flow that validates: every non-end node has an edge 'forward' (to a node
    later in a drawn order, or to an end), so an end is always reachable; the other
    edges go anywhere, loops included."""
    agents = [f"a{i}" for i in range(draw(st.integers(1, 4)))]
    others = [f"g{i}" for i in range(draw(st.integers(0, 2)))]
    others += [f"x{i}" for i in range(draw(st.integers(0, 2)))]
    ends = [f"e{i}" for i in range(draw(st.integers(1, 2)))]
    order = draw(st.permutations(agents + others))
    every = order + ends
    anywhere = st.sampled_from(every)
    nodes: Data = {}
    for k, nid in enumerate(order):
        forward = draw(st.sampled_from(order[k + 1 :] + ends))
        if nid.startswith("g"):
            branches = draw(st.lists(st.tuples(conditions, anywhere), min_size=1, max_size=2))
            nodes[nid] = gate(branches, forward)
        elif nid.startswith("x"):
            cases = dict(zip(CASES, draw(st.lists(anywhere, min_size=1, max_size=3)), strict=False))
            route = draw(st.sampled_from([forward, table(cases, forward), table({**cases, "ok": forward})]))
            save = draw(st.sampled_from([{}, {"save_as": "score"}]))
            nodes[nid] = action(http(f"run_{nid}"), route, **save)
        else:
            nodes[nid] = _agent(draw, nid, forward, anywhere)
    for nid in ends:
        extra = draw(
            st.sampled_from(
                [
                    {},
                    {"disposition": f"done_{nid}"},
                    {"greeting": "Bye {{tier}}."},
                    {"extract": [{"name": "rating", "type": "integer"}]},
                ]
            )
        )
        fns = draw(st.sampled_from([[], [capture(f"c_{nid}")], [http(f"h_{nid}")]]))
        nodes[nid] = end(functions=fns, **extra)
    globals_ = draw(
        st.sampled_from([[], [go("g_help", ends[0])], [go("g_help", ends[-1]), capture("g_note")]])
    )
    settings = {
        "max_transitions": draw(st.integers(1, 8)),
        "max_node_visits": draw(st.integers(1, 4)),
        "idle": {"prompts": draw(st.integers(0, 2)), "on_give_up": draw(st.sampled_from(("end", "wait")))},
        "context": draw(st.sampled_from(["append", "reset", "reset_with_summary"])),
    }
    return flow(
        {n: nodes[n] for n in draw(st.permutations(every))},
        start=order[0],
        handlers=HANDLERS,
        role="You are Ava{{ tier | }}.",
        settings=settings,
        global_functions=globals_,
        variables={
            "tier": {"type": "string", "default": "gold"},
            "n": {"type": "integer", "default": 3},
            "missing": {"type": "object"},
        },
    )  # declared, never given: a missing path


def _agent(draw: st.DrawFn, nid: str, forward: str, anywhere: st.SearchStrategy[str]) -> Data:
    exits = [
        go(f"t_{nid}", forward),
        capture("x_cap", transition_to=forward),
        http(f"h_{nid}", transition_to=forward),
        http(f"b_{nid}", transition_to=table({"ok": forward})),
    ]
    fns = [draw(st.sampled_from(exits))]
    for i in range(draw(st.integers(0, 2))):
        target = draw(anywhere)
        fns.append(
            draw(
                st.sampled_from(
                    [
                        go(f"t{i}_{nid}", target),
                        capture(f"c{i}_{nid}"),
                        capture(f"c{i}_{nid}", transition_to=target),
                        http(f"h{i}_{nid}"),
                        http(f"h{i}_{nid}", transition_to=table({"true": target}, draw(anywhere))),
                        {"name": "lookup", "transition_to": table({"found": target})},
                    ]
                )
            )
        )
    fns = list({f["name"]: f for f in reversed(fns)}.values())[::-1]  # a name once per node
    extra = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "greeting": st.just("Hi {{tier}}, at {{current_time}}."),
                "respond_immediately": st.booleans(),
                "extract": st.just(
                    [{"name": "rating", "type": "integer"}, {"name": "mood", "enum": ["ok", "bad"]}]
                ),
                "pre_actions": st.just([{"tts_say": "One moment."}, {"function": "log_entry"}]),
                "post_actions": st.sampled_from([[{"tts_say": "Next."}], [{"end_conversation": "Bye."}]]),
                "context": st.just("reset"),
                "add_role": st.booleans(),
            },
        )
    )
    return agent(*fns, task=f"Node {nid} for {{{{tier}}}}, score {{{{state.score | none}}}}.", **extra)


# --- hypothesis: events ----------------------------------------------------------------------
# Built once: hypothesis validates every new strategy object, which dominated the run time
# when they were rebuilt per event.
ARGS = st.one_of(
    st.just({}),
    st.fixed_dictionaries({"v": st.integers(-3, 3)}),
    st.fixed_dictionaries({"q": st.text(max_size=4)}),
    st.dictionaries(st.text(max_size=3), json_values, max_size=2),
)
RESULTS = st.one_of(st.fixed_dictionaries({"status": st.sampled_from([*CASES, True, 1])}), json_values)
HANDLER_STATE = st.none() | st.dictionaries(st.sampled_from(["score", "x"]), json_values, max_size=2)
EXTRACTED = st.dictionaries(
    st.sampled_from(["rating", "mood", "disposition", "other"]), json_values, max_size=3
)
GARBAGE = st.dictionaries(
    st.sampled_from(["type", "name", "run_id", "at", "zzz"]), json_values, max_size=3
) | st.fixed_dictionaries(
    {"type": st.sampled_from(["function_called", "function_result", "hangup"])},
    optional={"run_id": json_values, "name": json_values, "at": json_values},
)
RESPONSES = ("transition_in_yaml", "no_response", "?")
# calls and results weigh most: ending events would otherwise end most calls after a few steps
KINDS = (
    "call",
    "call",
    "call",
    "call",
    "result",
    "result",
    "extract",
    "idle",
    "spoke",
    "garbage",
    "max_duration",
    "hangup",
)


def function_names(definition: FlowDefinition, node: str | None = None) -> tuple[str, ...]:
    """The names offered on ``node`` (none offered: every name in the flow, and one unknown)."""
    flow_ = definition.flow
    if node in flow_.nodes and flow_.nodes[node].type in ("agent", "end"):
        own = [f.name for f in flow_.nodes[node].functions]
        offered = own + [g.name for g in flow_.global_functions] if flow_.nodes[node].type == "agent" else own
        if offered:
            return tuple(offered)
    names = {f.name for n in flow_.nodes.values() for f in n.functions}
    names |= {g.name for g in flow_.global_functions}
    return (*sorted(names), "nope")


def events(data: st.DataObject, definition: FlowDefinition, state: CallState, at: float) -> Any:
    """One event, picked to be meaningful for ``state`` most of the time, garbage sometimes."""
    kind = data.draw(st.sampled_from(KINDS), label="kind")
    stamp = at if data.draw(st.booleans()) else None
    event: Any
    if kind == "call":
        here = state.node if data.draw(st.integers(0, 3)) else None  # mostly a name offered here
        event = FunctionCalled(
            name=data.draw(st.sampled_from(function_names(definition, here))), args=data.draw(ARGS), at=stamp
        )
    elif kind == "result":
        pending = tuple(int(k) for k in sorted(state.pending))
        run_id = data.draw(
            st.sampled_from(pending) if pending and data.draw(st.booleans()) else st.integers(0, 9)
        )
        event = FunctionResult(
            run_id=run_id,
            result=data.draw(RESULTS),
            at=stamp,
            response=data.draw(st.sampled_from(RESPONSES)),
            error=data.draw(st.sampled_from((None, None, "boom"))),
            state=data.draw(HANDLER_STATE),
        )
    elif kind == "extract":
        event = ExtractionResult(
            node=data.draw(st.sampled_from((*definition.flow.nodes, "zz"))),
            values=data.draw(EXTRACTED),
            at=stamp,
        )
    elif kind == "hangup":
        event = HangUp(reason=data.draw(st.sampled_from(("user_hangup", "agent_lost", "error"))), at=stamp)
    elif kind == "garbage":
        return data.draw(GARBAGE)
    elif kind == "idle":
        empty = data.draw(st.sampled_from(("silence", "empty_transcript", "empty_turn")))
        event = UserIdle(kind=empty, at=stamp)  # type: ignore[arg-type]
    else:
        event = {"idle": UserIdle, "spoke": UserSpoke, "max_duration": MaxDuration}[kind](at=stamp)
    if data.draw(st.booleans()):
        return event.model_dump()  # the same event as it arrives over the wire
    return event
