"""The agent and the workflow hold equal state after every step (issue 23 §1): a model of
the call's two sides, each running the real engine, driven by hypothesis.

The agent applies what its LLM and its caller do at once (transitions, captures, turns,
idle, keys, its hangup) and queues each event for the workflow; the workflow applies the
queue in order, when the draw delivers it. What the workflow alone decides reaches the agent
as the real code carries it: a node function's result and a job group's route in an update's
answer (the agent adopts the state), an action node's result through ``settle``. An
extraction's result is kept by the workflow until the agent collects it (``values``),
applies it and queues an ``extracted`` event; extractions finish early, late, with an error
or never (the workflow's timeout answer: the same error on both sides). The agent may be
killed (its undelivered events lost, the next one attaching from the workflow's state) and
the workflow may continue as new (its state and kept results through JSON).

After every step, the workflow's state once it has applied what the agent sent equals the
agent's: node, path, variables, extracted values, handler state, running extractions, the
entry waiting for them, everything of ``CallState``. A divergence names the step, the
steps before it and both states.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from ringflow.callflow.engine import Engine
from ringflow.callflow.events import (
    CallStarted,
    DtmfEntered,
    Event,
    ExtractionResult,
    FunctionCalled,
    FunctionResult,
    HangUp,
    JobsFinished,
    UserIdle,
    UserSpoke,
)
from ringflow.callflow.function_step import function_step, state_digest
from ringflow.callflow.state import CallState, extraction_node
from tests.support import engine_flows as ef

LOCAL = ("transition_only", "capture", "global_node", "go_back")  # the agent's own steps
START = CallStarted(call_id="agree", caller_number="+15550100", at=ef.T0)


def with_extracted_reads(data: ef.Data) -> ef.Data:
    """A generated flow whose agent nodes also extract ``tier``, which gates, prompts and
    greetings read: most entries after such a node must wait for its extraction."""
    for node in data["nodes"].values():
        if node.get("extract") and node.get("type") is None:
            node["extract"] = [*node["extract"], {"name": "tier", "type": "string"}]
    return data


@st.composite
def digressing_flows(draw: st.DrawFn) -> ef.Data:
    """A generated flow with two global nodes: ``hours`` returns where the call was (capped by
    ``max_uses``, perhaps a cooldown, perhaps extracting what the nodes it returns to read),
    ``robot`` returns there, goes on to a named node, or (no return) leaves by its own
    function; one agent node may opt out."""
    data = draw(ef.flows())
    # room for a few digressions before the call's limits end it
    data["settings"]["max_transitions"] = draw(st.integers(4, 12))
    data["settings"]["max_node_visits"] = draw(st.integers(2, 4))
    nodes = data["nodes"]
    agents = [n for n, v in nodes.items() if v.get("type") is None]
    ends = [n for n, v in nodes.items() if v.get("type") == "end"]
    hours: dict[str, Any] = {
        "description": "Opening hours.",
        "return": True,
        "max_uses": draw(st.integers(1, 3)),
    }
    if draw(st.booleans()):
        hours["cooldown"] = draw(st.integers(1, 3))
    nodes["hours"] = ef.agent(task="Give the hours.", **{"global": hours})
    if draw(st.booleans()):
        nodes["hours"]["extract"] = [{"name": "rating", "type": "integer"}]
    if draw(st.booleans()):
        nodes["hours"]["greeting"] = "We open at eight."
    back = draw(st.sampled_from([True, False, *agents, *ends]))
    robot: dict[str, Any] = {"description": "A robot?", "return": back, "cooldown": draw(st.integers(1, 3))}
    exits = [] if back is not False else [ef.go("leave_robot", draw(st.sampled_from(ends)))]
    nodes["robot"] = ef.agent(*exits, task="Say you are an assistant.", **{"global": robot})
    if len(agents) > 1 and draw(st.booleans()):
        nodes[draw(st.sampled_from(agents[1:]))]["global_nodes"] = False
    return data


@st.composite
def subflow_flows(draw: st.DrawFn) -> ef.Data:
    """A generated flow with a ``subflow`` node using ``tests/fixtures/engine/subflows/check.yaml``
    (a greeting and a gate reading its inputs, an extraction, a capture routing to two end
    nodes, a global function of its own), entered from the first agent node and perhaps others;
    an input reads ``tier``, which the calling flow's nodes extract (the entry then waits),
    and the return routes on where it ended. The calling flow's global functions are offered
    inside it too: taking one abandons the subflow."""
    data = draw(ef.flows())
    nodes = data["nodes"]
    start = data["start"]
    targets = [n for n in nodes if n != "sub"]
    tier = draw(st.sampled_from(["{{tier | plain}}", "{{tier}}", "basic"]))
    nodes["sub"] = {
        "type": "subflow",
        "use": "subflows/check.yaml",
        "inputs": {"who": "{{caller_number | someone}}", "tier": tier},
        "transition_to": draw(
            st.sampled_from(
                [
                    draw(st.sampled_from(targets)),
                    {
                        "field": "end",
                        "cases": {"yes": draw(st.sampled_from(targets))},
                        "default": draw(st.sampled_from(targets)),
                    },
                ]
            )
        ),
    }
    agents = [n for n, v in nodes.items() if v.get("type") is None]
    first = start if start in agents else agents[0]
    for nid in {first, *draw(st.lists(st.sampled_from(agents), max_size=2))}:
        fns = nodes[nid].setdefault("functions", [])
        fns.insert(0, ef.go("into_sub", "sub"))  # every node keeps its own ways on: an end stays reachable
    if draw(st.booleans()):  # the call starts in the subflow (an inbound line that verifies first)
        data["start"] = "sub"
    data["settings"]["max_transitions"] = draw(st.integers(4, 12))
    data["settings"]["max_node_visits"] = draw(st.integers(2, 4))
    return data


@dataclass
class Sides:
    eng: Engine
    agent: CallState
    wf: CallState
    queue: list[Event] = field(default_factory=list)  # sent by the agent, not yet applied
    ready: list[ExtractionResult] = field(default_factory=list)  # the workflow's kept results
    running: list[str] = field(default_factory=list)  # extractions the workflow runs
    log: list[str] = field(default_factory=list)
    clock: float = ef.T0
    # What extractions gave once the call had ended (the last node's, or results no agent
    # applied): the record's alone, as the agent has left (``record``).
    after_end: list[ExtractionResult] = field(default_factory=list)

    def now(self) -> float:
        self.clock += 1
        return self.clock

    # --- the workflow ---------------------------------------------------------------------
    def wf_apply(self, event: Event) -> None:
        if self.wf.ended and isinstance(event, ExtractionResult) and event not in self.queue:
            self.after_end.append(event)
            return
        step = self.eng.apply(self.wf, event)
        self.wf = step.state
        self.running += [e.id for e in step.effects if e.type == "extract" and e.id]  # type: ignore[union-attr]
        if self.wf.ended:  # the call's end applies what no agent did (CallDriver.settle_values)
            self.after_end += self.ready
            self.ready = []

    def record(self) -> CallState:
        state = self.wf
        for result in self.after_end:
            state = self.eng.apply(state, result).state
        return state

    def deliver(self, n: int) -> None:
        for event in self.queue[:n]:
            self.wf_apply(event)
        del self.queue[:n]

    def caught_up(self) -> None:
        self.deliver(len(self.queue))

    # --- the agent ------------------------------------------------------------------------
    def agent_apply(self, event: Event) -> None:
        """A step the agent takes itself and reports in order."""
        self.agent = self.eng.apply(self.agent, event).state
        self.queue.append(event)

    def expected(self) -> CallState:
        """The workflow's state once it has applied everything the agent sent."""
        state = self.wf
        for event in self.queue:
            state = self.eng.apply(state, event).state
        return state


def finish_extraction(s: Sides, data: st.DataObject) -> None:
    """One extraction the workflow runs ends: values, an error, or (never) the timeout."""
    xid = data.draw(st.sampled_from(s.running), label="extraction")
    s.running.remove(xid)
    outcome = data.draw(st.sampled_from(("values", "values", "error", "never")), label="outcome")
    values = data.draw(ef.EXTRACTED | st.fixed_dictionaries({"tier": st.sampled_from(["gold", "basic"])}))
    error = {"values": None, "error": "extraction failed", "never": "the extraction did not finish in time"}
    result = ExtractionResult(
        node=extraction_node(xid), id=xid, values=values if outcome == "values" else {}, error=error[outcome]
    )
    if s.wf.ended:
        s.wf_apply(result.model_copy(update={"at": s.now()}))
    elif xid in s.wf.extracting:
        s.ready.append(result)


def collect(s: Sides, data: st.DataObject) -> None:
    """The agent's ``values`` answered for an extraction its state holds as running: it
    applies the result and queues the ``extracted`` event (``FlowController.apply_extraction``)."""
    ids = [r.id for r in s.ready if r.id in s.agent.extracting]
    if not ids or s.agent.ended:
        return
    xid = data.draw(st.sampled_from(ids), label="collect")
    found = next(r for r in s.ready if r.id == xid)
    s.ready = [r for r in s.ready if r.id != xid]
    s.agent_apply(found.model_copy(update={"at": s.now()}))


def agent_event(s: Sides, data: st.DataObject, definition: Any) -> Event | None:
    """What the agent's LLM or caller does on its own node, applied by the agent itself."""
    state = s.agent
    at = s.now()
    dynamic = s.eng.flow.nodes[state.node].dynamic if state.node is not None else ()
    if dynamic and data.draw(st.booleans(), label="digress"):  # (only a flow with global nodes)
        return FunctionCalled(name=data.draw(st.sampled_from(dynamic)), args={}, node=state.node, at=at)
    kinds = ("local", "local", "local", "spoke", "idle", "keys", "hangup", "refused")
    kind = data.draw(st.sampled_from(kinds))
    if kind == "refused":  # a name the node does not offer: refused, counted and reported by the agent
        return FunctionCalled(name="not_offered", args={}, node=state.node, at=at)
    if kind == "spoke":
        return UserSpoke(at=at)
    if kind == "idle":
        return UserIdle(at=at)
    if kind == "hangup":
        return HangUp(at=at) if data.draw(st.integers(0, 5)) == 0 else None
    if kind == "keys":
        return DtmfEntered(digits="1", node=state.node, at=at)
    if state.node is None:
        return None
    fns = [fn for fn in s.eng.flow.nodes[state.node].functions.values() if fn.kind in LOCAL]
    if not fns:
        return None
    fn = data.draw(st.sampled_from(fns), label="local")
    captured = ({}, {"v": 1}, {"v": 2}, {"v": "three"})  # the last one refused by its schema
    args = data.draw(st.sampled_from(captured)) if fn.kind == "capture" else {}
    return FunctionCalled(name=fn.entry.name, args=args, node=state.node, at=at)


def remote(s: Sides, data: st.DataObject) -> None:
    """A node function run by the workflow (``call_function``): after the agent's events
    (``after_seq``), its result applied there, the agent adopting the answer's state with
    the events it took while it waited on top (``FlowController.rebased``)."""
    state = s.agent
    if state.node is None or state.ended or state.waiting is not None:
        return
    fns = [fn for fn in s.eng.flow.nodes[state.node].functions.values() if fn.kind in ("handler", "http")]
    if not fns:
        return
    fn = data.draw(st.sampled_from(fns), label="remote")
    s.caught_up()
    args = {"query": "x"} if fn.kind == "handler" else {"q": "x"}
    if data.draw(st.integers(0, 4), label="bad args") == 0:  # refused by the workflow's engine, counted there
        args = {"not_an_argument": 1}
    asked_from = s.agent
    before = s.wf
    called = FunctionCalled(name=fn.entry.name, args=args, node=state.node, at=s.now())
    s.wf_apply(called)
    outcome: FunctionResult | None = None
    for run in [r for r in s.wf.pending.values() if r.purpose == "tool"]:
        outcome = FunctionResult(
            run_id=run.run_id, result=data.draw(ef.RESULTS), state=data.draw(ef.HANDLER_STATE)
        )
        s.wf_apply(outcome)
    answer = s.wf  # everything the agent sent before it asked is in it (``applied_seq``)
    # while the agent waits, it takes events of its own (an extraction's result, the caller's
    # turn), sent after the request: the workflow applies them after the answer's state
    waited = len(s.queue)
    if not s.agent.ended and data.draw(st.booleans(), label="moves while waiting"):
        if data.draw(st.booleans(), label="collects"):
            collect(s, data)
        else:
            s.agent_apply(UserSpoke(at=s.now()))
    moves = s.queue[waited:]
    if outcome is not None and state_digest(asked_from) == state_digest(before):
        # the answer is the outcome alone (workflows/function_answers.py): the agent's engine
        # takes the step from the state it asked from, and must end where the workflow did
        step = function_step(s.eng, asked_from, called, outcome)
        assert step is not None and step.state == answer, "the outcome's step is not the workflow's"
        adopted = step.state
    else:
        adopted = answer
    for event in moves:  # FlowController.rebased: its own later events on top, as the workflow will
        adopted = s.eng.apply(adopted, event).state
    s.agent = adopted


def settle(s: Sides, data: st.DataObject) -> None:
    """The workflow runs an action node's function (or a ``function:`` action) and routes on
    its result; the agent, waiting in ``settle``, adopts the state."""
    s.caught_up()
    for run in list(s.wf.pending.values()):
        s.wf_apply(
            FunctionResult(
                run_id=run.run_id,
                result={"status": data.draw(st.sampled_from(ef.CASES))},
                at=s.now(),
                state=data.draw(ef.HANDLER_STATE),
            )
        )
    s.agent = s.wf


def route_jobs(s: Sides, data: st.DataObject) -> None:
    """A job group routed (``route_jobs``): after the agent's events, in the workflow, the
    agent adopting the answer's state."""
    if s.agent.node is None:
        return
    s.caught_up()
    names = list(s.eng.flow.nodes[s.agent.node].functions) or ["none"]
    s.wf_apply(
        JobsFinished(
            group_id="g1",
            node=s.agent.node,
            name=data.draw(st.sampled_from(names)),
            result={"outcome": data.draw(st.sampled_from(("completed", "failed")))},
            at=s.now(),
        )
    )
    s.agent = s.wf


def kill(s: Sides, data: st.DataObject) -> None:
    """The agent dies: what it had not sent is lost (or, journaled, read back); the next
    agent attaches with the workflow's state."""
    if data.draw(st.booleans(), label="journaled"):
        s.caught_up()
    s.queue = []
    s.agent = s.wf


def continue_as_new(s: Sides) -> None:
    """The workflow's state and kept results through JSON; its extractions run again."""
    s.caught_up()  # continue-as-new waits for its handlers and tasks
    s.wf = CallState.model_validate_json(s.wf.model_dump_json())
    s.ready = [ExtractionResult.model_validate(json.loads(r.model_dump_json())) for r in s.ready]


ACTIONS = (
    "agent", "agent", "agent", "deliver", "deliver", "finish", "finish", "collect", "collect",
    "remote", "settle", "jobs", "kill", "can",
)  # fmt: skip


def divergence(step: int, log: list[str], agent: CallState, wf: CallState) -> str:
    a, w = agent.model_dump(), wf.model_dump()
    keys = [k for k in a if a[k] != w[k]]
    lines = [f"the agent and the workflow differ after step {step} ({log[-1] if log else 'start'}):"]
    lines += [f"  steps: {' | '.join(log)}"]
    lines += [f"  {k}: agent {a[k]!r} / workflow {w[k]!r}" for k in keys]
    lines += [f"  agent: {a}", f"  workflow: {w}"]
    return "\n".join(lines)


def play(data: st.DataObject, flow: ef.Data, max_steps: int = 30) -> Sides:
    """Play a drawn sequence of the two sides' steps, checking agreement after each."""
    definition = ef.build(with_extracted_reads(flow))
    eng = Engine(definition)
    first = eng.start(START).state
    s = Sides(eng, first, first)
    for i in range(data.draw(st.integers(1, max_steps), label="steps")):
        action = data.draw(st.sampled_from(ACTIONS), label="action")
        if action == "agent" and not s.agent.ended:
            event = agent_event(s, data, definition)
            if event is not None:
                s.agent_apply(event)
                action = f"agent {event.type}" + (
                    f" {event.name}" if isinstance(event, FunctionCalled) else ""
                )
        elif action == "deliver" and s.queue:
            s.deliver(data.draw(st.integers(1, len(s.queue)), label="delivered"))
        elif action == "finish" and s.running:
            finish_extraction(s, data)
        elif action == "collect":
            collect(s, data)
        elif action == "remote":
            remote(s, data)
        elif (action == "settle" and s.wf.pending) or (action == "settle" and s.queue):
            settle(s, data)
        elif action == "jobs":
            route_jobs(s, data)
        elif action == "kill":
            kill(s, data)
        elif action == "can":
            continue_as_new(s)
        s.log.append(action)
        expected = s.expected()
        assert s.agent == expected, divergence(i, s.log, s.agent, expected)
    s.caught_up()
    assert s.agent == s.wf, divergence(len(s.log), s.log, s.agent, s.wf)
    # after the end, extraction changes nothing but its own part of the record
    own = {"extracted", "extracting", "disposition", "now"}
    assert s.record().model_dump(exclude=own) == s.wf.model_dump(exclude=own)
    return s
