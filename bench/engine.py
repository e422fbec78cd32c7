"""Engine hot path: how long one event takes to become the next state and its effects.

Two metrics, in microseconds, on a 20-node flow built here (templated role and tasks,
four functions per node, two global functions):

- ``transition``: the LLM calls a transition-only function; out come the new state and
  a ``SetNode`` with the next node's prompt and tools.
- ``branch_result``: an HTTP entry's result comes back and is routed through a branch
  table to the next node.

The baseline is the least a transition could cost in Python: copy the state's dict and
look the target up in a table. Run: ``.venv/bin/python bench/engine.py``.
"""

from __future__ import annotations

from typing import Any

from ringflow.callflow.effects import SetNode
from ringflow.callflow.engine import Engine, Step
from ringflow.callflow.events import CallStarted, FunctionCalled, FunctionResult
from ringflow.callflow.loader import validate_data

try:
    from _report import emit, metric, sample_ns
except ImportError:  # run as ``python -m bench.engine``
    from bench._report import emit, metric, sample_ns

NODES = 20
N = 20_000
T0 = 1_700_000_000.0


def bench_flow() -> dict[str, Any]:
    ids = [f"step_{i}" for i in range(NODES - 1)]
    nodes: dict[str, Any] = {}
    for i, nid in enumerate(ids):
        nxt = ids[i + 1] if i + 1 < len(ids) else "done"
        nodes[nid] = {
            "task": f"Stage {i}: help {{{{first_name}}}} with their {{{{topic}}}}. Their plan is "
            "{{state.plan.name | not chosen yet}}. Keep answers short.",
            "functions": [
                {
                    "name": f"next_{i}",
                    "transition_only": True,
                    "transition_to": nxt,
                    "description": f"{{{{first_name}}}} is ready to move past stage {i}.",
                },
                {
                    "name": f"back_{i}",
                    "transition_only": True,
                    "transition_to": ids[max(i - 1, 0)],
                    "description": "The caller wants to go back a step.",
                },
                {
                    "name": f"note_{i}",
                    "capture": True,
                    "description": "Note a detail the caller gave.",
                    "parameters": {
                        "type": "object",
                        "required": ["text"],
                        "properties": {"text": {"type": "string"}, "score": {"type": "integer"}},
                    },
                },
                {
                    "name": f"check_{i}",
                    "description": "Check availability for a date.",
                    "parameters": {
                        "type": "object",
                        "properties": {"date": {"type": "string"}},
                        "required": ["date"],
                    },
                    "http": {"method": "POST", "url": "https://api.example.test/availability?d={{date}}"},
                    "transition_to": {
                        "field": "status",
                        "cases": {"available": nxt, "full": ids[0]},
                        "default": "done",
                    },
                },
            ],
        }
    nodes["done"] = {"type": "end", "task": "Thank {{first_name}} and say goodbye.", "disposition": "done"}
    return {
        "flow": "bench",
        "role": "You are Ava from {{company}}, calling {{first_name}}. Be brief.",
        "variables": {
            "first_name": {"type": "string", "required": True},
            "company": {"type": "string", "default": "Northside"},
            "topic": {"type": "string", "default": "appointment"},
        },
        "settings": {"max_transitions": 1000, "max_node_visits": 100},
        "global_functions": [
            {
                "name": "talk_to_human",
                "transition_only": True,
                "transition_to": "done",
                "description": "The caller asks for a human.",
            },
            {
                "name": "complain",
                "capture": True,
                "description": "Record a complaint.",
                "parameters": {"type": "object", "properties": {"about": {"type": "string"}}},
            },
        ],
        "nodes": nodes,
    }


def moved(step: Step, node: str) -> None:
    """Guard against timing a path that does not do the work: it must reach ``node``."""
    set_node = next((e for e in step.effects if isinstance(e, SetNode)), None)
    assert set_node is not None and set_node.node == node and set_node.tools and set_node.prompt, step


def main() -> None:
    report = validate_data(bench_flow())
    assert report.definition is not None, report.errors
    engine = Engine(report.definition)
    state = engine.start(CallStarted(call_id="bench", variables={"first_name": "Dana"}, at=T0)).state

    call = FunctionCalled(name="next_0", at=T0 + 5)
    moved(engine.apply(state, call), "step_1")
    transition = sample_ns(lambda: engine.apply(state, call), N)

    waiting = engine.apply(state, FunctionCalled(name="check_0", args={"date": "friday"}, at=T0 + 5)).state
    result = FunctionResult(run_id=waiting.seq, result={"status": "available", "slots": 3}, at=T0 + 6)
    moved(engine.apply(waiting, result), "step_1")
    branch = sample_ns(lambda: engine.apply(waiting, result), N)

    state_dict = state.model_dump()
    table = {f"next_{i}": f"step_{i + 1}" for i in range(NODES - 2)}

    def baseline() -> None:
        d = dict(state_dict)
        d["node"] = table["next_0"]

    base = sample_ns(baseline, N)
    emit("engine", [metric("transition", transition, base), metric("branch_result", branch, base)])


if __name__ == "__main__":
    main()
