"""A function the workflow runs, as one step both sides can take.

The LLM calls a handler, HTTP, MCP or knowledge function; the workflow runs it and the agent
needs what the engine makes of it: the tool's answer, the new node's prompt and tools, the
speech, the new state. Sending all of that back in the update's result writes the node's
prompt and tools and the whole state into the call's history on every such call, though the
agent holds the same engine and, as often as not, the same state the call was in. So the
workflow can send the one thing the agent cannot know, the run's outcome (a
``FunctionResult``), and the agent takes the step itself: ``FunctionCalled`` then the
outcome, from the state both sides had, through ``function_step``. The digests say whether
the two sides stood in the same place before and after; where they did not, the agent asks
for the whole answer (``workflows/function_answers.py``).
"""

from __future__ import annotations

import hashlib
import json

from ringflow.callflow.effects import RunFunction
from ringflow.callflow.engine import Engine, Step
from ringflow.callflow.events import FunctionCalled, FunctionResult
from ringflow.callflow.state import CallState

DIGEST_CHARS = 16  # 64 bits of sha-256: two states of one call that differ never collide in practice


def state_digest(state: CallState) -> str:
    """A short fingerprint of the whole state, the same on both sides for equal states
    (canonical JSON: sorted keys, so dicts built in another order still agree)."""
    text = json.dumps(state.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]


def function_step(
    engine: Engine, state: CallState, called: FunctionCalled, outcome: FunctionResult
) -> Step | None:
    """The call's step from ``state`` through the function call and its run's outcome: the
    new state and every effect of both, in order, as the workflow applied them. None when
    the call orders no run (it was refused, or needs none), or the outcome is another run's."""
    first = engine.apply(state, called)
    run = next((e for e in first.effects if isinstance(e, RunFunction)), None)
    if run is None or run.run_id != outcome.run_id:
        return None
    second = engine.apply(first.state, outcome)
    return Step(second.state, [*first.effects, *second.effects])
