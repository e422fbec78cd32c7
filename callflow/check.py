"""``flow check``'s comparison: a recorded call's engine inputs, run through a new version.

A recorded call is the list of events its engine applied, in order, each with the effects
the engine answered (``ringflow/flow_check.py`` reads them out of the call's history by
replaying it). This runs the same inputs through the new version's engine and compares,
after every input, where the call is and what it refused; at the end, the path, the gates'
choices and the disposition.

The caller's turns and the LLM's function calls are taken as they were: the question is
what the new version does with the same conversation. Results of work the engine ordered
(a handler's, an HTTP call's, an extraction's) are fed to the new engine when it orders the
same work (the same function on the same node, an extraction of the same node); work only
the new version orders gets no result, and is reported as such. A handler's result is the
recorded one, not a fresh run of new handler code.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from ringflow.callflow.compiled import CompiledFlow
from ringflow.callflow.effects import Effect, Extract, Rejected, RunFunction, ToolResponse
from ringflow.callflow.engine import Engine
from ringflow.callflow.events import CallStarted, Event, ExtractionResult, FunctionCalled, FunctionResult
from ringflow.callflow.model import FlowDefinition
from ringflow.callflow.state import CallState


@dataclass(frozen=True)
class RecordedStep:
    """One input of a recorded call, as its engine applied it, and what it answered."""

    event: Event
    effects: list[Effect]
    state: CallState  # after it


class Side(BaseModel):
    """Where one version is after a step."""

    node: str | None
    refused: list[str] = []
    ended: bool = False
    disposition: str | None = None


class Parting(BaseModel):
    """The first step where the versions part: the input, and each side after it."""

    step: int
    event: str
    recorded: Side
    new: Side


class CallCheck(BaseModel):
    """One call: whether each aspect stays the same under the new version."""

    call_id: str
    steps: int
    changed: bool
    path_same: bool
    refused_same: bool
    gates_same: bool
    disposition_same: bool
    recorded_path: list[str]
    new_path: list[str]
    recorded_gates: list[list[str]]
    new_gates: list[list[str]]
    recorded_disposition: str | None
    new_disposition: str | None
    recorded_refused: list[str]
    new_refused: list[str]
    first_difference: Parting | None = None
    notes: list[str] = []


def refusals(event: Event, effects: list[Effect]) -> list[str]:
    """What the engine refused of ``event``: a rejection, or an LLM tool call it answered
    with an error (a function the node does not offer, arguments it does not take)."""
    out = [e.reason for e in effects if isinstance(e, Rejected)]
    if isinstance(event, FunctionCalled):
        out += [
            f"{event.name}: {str(e.result)[:200]}"
            for e in effects
            if isinstance(e, ToolResponse) and e.error and e.name == event.name
        ]
    return out


def gate_choices(definition: FlowDefinition, path: list[str]) -> list[list[str]]:
    """Each gate the path went through and the node it chose."""
    nodes = definition.flow.nodes
    return [
        [node, path[i + 1]]
        for i, node in enumerate(path[:-1])
        if node in nodes and nodes[node].type == "gate"
    ]


def _describe(event: Event) -> str:
    data = event.model_dump(exclude_none=True, exclude={"at"})
    kind = data.pop("type")
    if kind == "call_started":
        return "call_started"
    shown = ", ".join(f"{k}={str(v)[:60]}" for k, v in data.items() if k not in ("variables", "state"))
    return f"{kind}({shown})"


@dataclass
class _Work:
    """Work an engine ordered and not yet got back: runs by (node, function), extractions by node."""

    runs: dict[tuple[str, str], deque[int]] = field(default_factory=dict)
    extracts: dict[str, deque[str]] = field(default_factory=dict)
    run_keys: dict[int, tuple[str, str]] = field(default_factory=dict)

    def note(self, effects: list[Effect]) -> None:
        for e in effects:
            if isinstance(e, RunFunction):
                self.runs.setdefault((e.node, e.name), deque()).append(e.run_id)
                self.run_keys[e.run_id] = (e.node, e.name)
            elif isinstance(e, Extract):
                self.extracts.setdefault(e.node, deque()).append(e.id)


def check_call(
    call_id: str,
    recorded_definition: FlowDefinition,
    new: FlowDefinition | CompiledFlow,
    steps: list[RecordedStep],
) -> CallCheck:
    """Run a recorded call's inputs through ``new`` and compare with what was recorded."""
    engine = Engine(new)
    old_work, new_work = _Work(), _Work()
    state = CallState()
    parting: Parting | None = None
    notes: list[str] = []
    old_refused: list[str] = []
    new_refused: list[str] = []
    for i, rec in enumerate(steps):
        ev = rec.event
        fed: Event | None = ev
        if isinstance(ev, FunctionResult):
            key = old_work.run_keys.get(ev.run_id)
            queue = new_work.runs.get(key) if key is not None else None
            if not queue:
                fed = None
                what = f"{key[1]} on {key[0]}" if key else f"run {ev.run_id}"
                notes.append(f"step {i}: the new version does not run {what}: its result is not used")
            else:
                fed = ev.model_copy(update={"run_id": queue.popleft()})
        elif isinstance(ev, ExtractionResult):
            queue_x = new_work.extracts.get(ev.node)
            if not queue_x:
                fed = None
                notes.append(f"step {i}: the new version does not extract on {ev.node} here")
            else:
                fed = ev.model_copy(update={"id": queue_x.popleft() or ev.id})
        old_work.note(rec.effects)
        old_side = Side(
            node=rec.state.node,
            refused=refusals(ev, rec.effects),
            ended=rec.state.ended,
            disposition=rec.state.disposition,
        )
        if fed is None:
            new_side = Side(node=state.node, ended=state.ended, disposition=state.disposition)
        else:
            step = engine.start(fed) if isinstance(fed, CallStarted) else engine.apply(state, fed)
            state = step.state
            new_work.note(step.effects)
            new_side = Side(
                node=state.node,
                refused=refusals(fed, step.effects),
                ended=state.ended,
                disposition=state.disposition,
            )
        old_refused += old_side.refused
        new_refused += new_side.refused
        if parting is None and (
            old_side.node != new_side.node
            or bool(old_side.refused) != bool(new_side.refused)
            or old_side.ended != new_side.ended
        ):
            parting = Parting(step=i, event=_describe(ev), recorded=old_side, new=new_side)
    final = steps[-1].state if steps else CallState()
    new_def = new.definition if isinstance(new, CompiledFlow) else new
    old_gates = gate_choices(recorded_definition, final.path)
    new_gates = gate_choices(new_def, state.path)
    path_same = final.path == state.path
    refused_same = len(old_refused) == len(new_refused)
    gates_same = old_gates == new_gates
    disposition_same = final.disposition == state.disposition and final.end_reason == state.end_reason
    if parting is None and not disposition_same:
        parting = Parting(
            step=len(steps) - 1,
            event="the end",
            recorded=Side(node=final.node, ended=final.ended, disposition=final.disposition),
            new=Side(node=state.node, ended=state.ended, disposition=state.disposition),
        )
    return CallCheck(
        call_id=call_id,
        steps=len(steps),
        changed=not (path_same and refused_same and gates_same and disposition_same),
        path_same=path_same,
        refused_same=refused_same,
        gates_same=gates_same,
        disposition_same=disposition_same,
        recorded_path=list(final.path),
        new_path=list(state.path),
        recorded_gates=old_gates,
        new_gates=new_gates,
        recorded_disposition=final.disposition,
        new_disposition=state.disposition,
        recorded_refused=old_refused,
        new_refused=new_refused,
        first_difference=parting,
        notes=notes[:20],
    )


def summary(checks: list[CallCheck]) -> dict[str, Any]:
    changed = [c for c in checks if c.changed]
    return {
        "checked": len(checks),
        "changed": len(changed),
        "path_changed": sum(not c.path_same for c in checks),
        "refused_changed": sum(not c.refused_same for c in checks),
        "gates_changed": sum(not c.gates_same for c in checks),
        "disposition_changed": sum(not c.disposition_same for c in checks),
    }
