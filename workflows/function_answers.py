"""What a ``call_function`` update answers: the whole step, or the run's outcome alone.

The whole step (the engine's effects, the node's prompt and tools among them, and the new
state) is most of what a call's history holds. An agent whose state is the workflow's, as
its request's ``state_digest`` says, gets the run's ``outcome`` alone and takes the step
with its own engine (``callflow/function_step.py``). The workflow first takes that same
step itself, from the state it ran the function in, and offers the short answer only when
it gives exactly the effects and the state the call now has: when something else changed
the state while the function ran, or the step differs in any way, the answer stays whole.
The whole answer is what is kept (and carried through continue-as-new), so an agent that
asks again from elsewhere (a new agent after a crash) gets it whole.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from ringflow.callflow.effects import Effect
    from ringflow.callflow.engine import Engine
    from ringflow.callflow.events import FunctionCalled, FunctionResult
    from ringflow.callflow.function_step import function_step, state_digest
    from ringflow.callflow.state import CallState
    from ringflow.contract.updates import CallFunctionRequest, CallFunctionResult


def with_outcome(
    engine: Engine,
    before: CallState,
    called: FunctionCalled,
    outcome: FunctionResult,
    effects: list[Effect],
    out: CallFunctionResult,
    now: CallState,
) -> CallFunctionResult:
    """``out`` with what a short answer needs, when the step from ``before`` through the call
    and its outcome is the one the workflow took (``effects``, ending in ``now``)."""
    step = function_step(engine, before, called, outcome)
    if step is None or step.state != now or step.effects != effects:
        return out
    return out.model_copy(
        update={"outcome": outcome, "digest": state_digest(now), "derives_from": state_digest(before)}
    )


def answer(req: CallFunctionRequest, out: CallFunctionResult) -> CallFunctionResult:
    """What goes back to this request: the outcome alone to an agent asking from the state
    the step starts from, else the whole answer (without the short one's fields)."""
    if out.derives_from is not None and req.state_digest == out.derives_from:
        return out.model_copy(update={"effects": [], "state": None, "derives_from": None})
    if out.outcome is None and out.digest is None and out.derives_from is None:
        return out
    return out.model_copy(update={"outcome": None, "digest": None, "derives_from": None})
