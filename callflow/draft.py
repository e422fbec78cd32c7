"""Moving a call between nodes: the one place that enters nodes and ends calls.

A :class:`Draft` is the call's next state being built (``Draft.call``) plus the effects
decided so far. It copies the old state shallowly and replaces (never mutates) the containers it
changes, so the state the engine was given is never touched: running the engine
twice on the same input gives the same output.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from ringflow.callflow.compiled import CompiledFlow, CompiledFunction
from ringflow.callflow.compose import compose, template_values
from ringflow.callflow.conditions import BranchError, holds, resolve_branch
from ringflow.callflow.dispositions import disposition_of
from ringflow.callflow.effects import Effect, EndCall, Extract, LLMTurn, Rejected, RunFunction, Say
from ringflow.callflow.end_reasons import EndReason
from ringflow.callflow.http_render import referenced_values, render_http
from ringflow.callflow.model import Action, BranchTable, HttpSpec, TransferSpec, Transition
from ringflow.callflow.reads import NONE, template_names
from ringflow.callflow.state import CallState, Digression, PendingRun, Waiting, extraction_node
from ringflow.callflow.subflow_handlers import handler_scope
from ringflow.callflow.subflows import bind, inside, pop, push, returns_at, unwind
from ringflow.callflow.templating import (
    Template,
    TemplateSyntaxError,
    compile_template,
)

MAX_CHAIN = 1000  # gates and actions entered in one step; max_node_visits stops loops first


_ENTER_TURN = LLMTurn(reason="enter")  # effects are frozen: one instance serves every node entry
# A digression's return re-enters the node the call was on: not its greeting again, a bridge.
RESUME_INSTRUCTIONS = (
    "The caller's side question is dealt with and the call is back here. Pick the "
    "conversation up where it was, with a short bridge such as 'As I was saying'; do not "
    "greet the caller again or repeat everything already said."
)
_RESUME_TURN = LLMTurn(reason="return", instructions=RESUME_INSTRUCTIONS)


@lru_cache(maxsize=1024)
def _template(text: str) -> Template | None:
    """Parsed once per distinct text (these texts come from the flow, so there are few)."""
    try:
        return compile_template(text)
    except TemplateSyntaxError:
        return None


def waits_for(flow: CompiledFlow, extracting: list[str], names: frozenset[str]) -> list[str]:
    """The running extractions (of ``extracting``) that give one of ``names``."""
    if not names or not extracting:
        return []
    return [x for x in extracting if names & flow.extracts.get(extraction_node(x), NONE)]


class Draft:
    def __init__(self, flow: CompiledFlow, state: CallState, at: float | None) -> None:
        self.flow = flow
        self.settings = flow.definition.flow.settings
        self.call = state.model_copy()
        if at is not None:
            self.call.now = at
        self.effects: list[Effect] = []

    # --- small state edits (copy on write) -------------------------------------------
    def set_state(self, state: dict[str, Any]) -> None:
        self.call.state = state

    def put_state(self, key: str, value: Any) -> None:
        self.call.state = {**self.call.state, key: value}

    def add_pending(self, run: PendingRun) -> None:
        self.call.pending = {**self.call.pending, str(run.run_id): run}

    def pop_pending(self, run_id: int) -> PendingRun | None:
        run = self.call.pending.get(str(run_id))
        if run is not None:
            self.call.pending = {k: v for k, v in self.call.pending.items() if k != str(run_id)}
        return run

    def render(self, text: str | None) -> str:
        """Speech, action texts and the idle goodbye, parsed once per distinct text.

        Validation checks these templates; should one still not parse (a definition
        built without validation), it is said as written rather than crash the call.
        """
        if not text:
            return ""
        tpl = _template(text)
        return tpl.render(template_values(self.call)) if tpl is not None else text

    # --- functions --------------------------------------------------------------------
    def run_function(self, fn: CompiledFunction, node: str, args: dict[str, Any], purpose: str) -> None:
        self.call.seq += 1
        run_id = self.call.seq
        self.add_pending(PendingRun(run_id=run_id, name=fn.entry.name, node=node, args=args, purpose=purpose))
        http: HttpSpec | None = None
        http_values: dict[str, Any] | None = None
        if fn.entry.http is not None:
            flow_values = template_values(self.call)
            http = render_http(fn.entry.http, args, flow_values)
            http_values = referenced_values(fn.entry.http, flow_values)
        mcp = fn.entry.mcp
        transfer: TransferSpec | None = None
        if fn.entry.transfer is not None:
            values = template_values(self.call)
            tspec = fn.entry.transfer
            transfer = tspec.model_copy(
                update={
                    "to": compile_template(tspec.to).render(values).strip(),
                    "announce": compile_template(tspec.announce).render(values) if tspec.announce else None,
                }
            )
        self.effects.append(
            RunFunction(
                run_id=run_id,
                node=node,
                name=fn.entry.name,
                kind="knowledge"
                if fn.kind == "knowledge"
                else "mcp"
                if mcp is not None
                else "transfer"
                if transfer
                else "http"
                if http
                else "handler",
                args=args,
                timeout_s=(http.timeout_s if http and http.timeout_s else fn.timeout_s),
                retry=fn.entry.retry,
                http=http,
                http_values=http_values,
                action=purpose == "action_node",
                cancel_on_interruption=fn.cancel_on_interruption,
                mcp_server=mcp.server if mcp is not None else None,
                mcp_tool=mcp.tool if mcp is not None else None,
                transfer=transfer,
                knowledge=fn.entry.knowledge,
                scope=fn.scope,
            )
        )

    def run_side_effect(self, name: str, node: str) -> None:
        self.call.seq += 1
        run_id = self.call.seq
        self.add_pending(PendingRun(run_id=run_id, name=name, node=node, purpose="side_effect"))
        scope = handler_scope(self.flow.definition, node, name)
        self.effects.append(RunFunction(run_id=run_id, node=node, name=name, kind="handler", scope=scope))

    # --- transitions ------------------------------------------------------------------
    def route(self, t: Transition | None, result: Any, from_node: str) -> str | None:
        """Target of a transition given a result; raises BranchError for the LLM."""
        if t is None:
            return None
        if isinstance(t, str):
            return t
        return resolve_branch(t, result)

    def enter(self, node_id: str, from_node: str | None, speech: str | None = None) -> None:
        deferred = None
        names = template_names(speech)
        leaving = self.flow.extracts.get(from_node, NONE) if from_node is not None else NONE
        if speech and (self.blocked(names) or names & leaving):
            deferred = (
                speech  # said on arrival (its value is being extracted); the wait speech fills the wait
            )
        elif speech:
            self.effects.append(Say(text=self.render(speech), allow_interrupt=False))
        self.go(node_id, from_node, deferred)

    # --- global nodes (callflow/digressions.py) ----------------------------------------
    def digress(self, node_id: str, origin: str) -> None:
        """Into the global node ``node_id`` from ``origin``: a returning one pushes the frame
        its ``go_back`` pops (before entering, so the node's tools show ``go_back``)."""
        spec = self.flow.global_nodes[node_id]
        self.call.global_uses = {**self.call.global_uses, node_id: self.call.global_uses.get(node_id, 0) + 1}
        if spec.returns:
            self.call.return_stack = [*self.call.return_stack, Digression(node=node_id, origin=origin)]
        else:  # a plain jump: its cooldown counts from the entry
            self.call.global_since = {**self.call.global_since, node_id: self.call.transitions + 1}
        self.enter(node_id, origin)

    def go_back(self, node_id: str) -> None:
        """End the innermost digression (the one into ``node_id``): back to where it left,
        re-entered as a resumption, or on to the node ``return`` names, entered as usual."""
        frame = self.call.return_stack[-1]
        self.call.return_stack = self.call.return_stack[:-1]
        spec = self.flow.global_nodes[node_id]
        self.call.global_since = {**self.call.global_since, node_id: self.call.transitions + 1}
        if spec.return_ is True:
            self.go(frame.origin, node_id, resuming=True)
        else:
            self.enter(str(spec.return_), node_id)

    def go(
        self,
        node_id: str,
        from_node: str | None,
        speech: str | None = None,
        arrived: bool = False,
        resuming: bool = False,
    ) -> None:
        """Enter ``node_id`` and whatever gates and actions lead on from it. ``arrived``: the
        call is on it already (an entry that waited for values, resumed). ``resuming``: a
        digression returns to it (``show_node``)."""
        for _ in range(MAX_CHAIN):
            if self.call.ended:
                return
            if not arrived:
                if from_node is not None:
                    self.call.transitions += 1
                    if self.call.transitions > self.settings.max_transitions:
                        self.end("max_transitions")
                        return
                visits = self.call.visits.get(node_id, 0) + 1
                if visits > self.settings.max_node_visits:
                    self.end("loop_detected")
                    return
                if from_node is not None:
                    self.leave(from_node)
                    while self.call.subflows and not inside(node_id, self.call.subflows[-1].node):
                        pop(self.call, None)  # left by a way of the calling flow: abandoned
                    stack = self.call.return_stack
                    if stack and stack[-1].node == from_node:  # left by its own way: no return
                        self.call.return_stack = stack[:-1]
                self.call.path = [*self.call.path, node_id]
                self.call.visits = {**self.call.visits, node_id: visits}
                self.call.node = node_id
                self.call.idle_count = 0
            arrived = False
            if self.blocked(self.flow.reads.get(node_id, NONE)) or (
                speech is not None and self.blocked(template_names(speech))
            ):
                self.wait(node_id, from_node, speech, resuming)
                return
            self.call.waiting = None
            if speech:
                self.effects.append(Say(text=self.render(speech), allow_interrupt=False))
                speech = None
            node = self.flow.nodes[node_id].node
            if node.type == "gate":
                values = self.call.values()
                target = next((b.to for b in node.branches or [] if holds(b.when, values)), node.default)
                from_node, node_id = node_id, target or node_id
                continue
            if node.type == "subflow":  # into the used flow's start node, with its inputs
                from_node, node_id = node_id, self.enter_subflow(node_id)
                continue
            if node.type == "end" and returns_at(self.call, node_id):
                target = self.return_from_subflow(node_id)
                if target is None:
                    return
                from_node, node_id = node_id, target
                continue
            if node.type == "action":
                self.run_function(self.flow.run_functions[node_id], node_id, {}, "action_node")
                return
            self.show_node(node_id, from_node, resuming)
            return
        self.end("error")

    # --- subflows (callflow/subflows.py) -----------------------------------------------
    def enter_subflow(self, node_id: str) -> str:
        """Bind the inputs in the caller's values, push its frame: the subflow's start node."""
        spec = self.flow.definition.subflows[node_id]
        node = self.flow.nodes[node_id].node
        variables, problems = bind(spec, node.inputs, template_values(self.call))
        self.effects += [Rejected(reason=f"subflow '{node_id}': {p}") for p in problems]
        push(self.call, node_id, variables)
        return spec.start

    def return_from_subflow(self, node_id: str) -> str | None:
        """The subflow reached its end node ``node_id``: its actions' and greeting's words
        (in its own values), then back to the caller with its outputs, on to the calling
        node's ``transition_to`` (routed on the result). None: the call ended here."""
        node = self.flow.nodes[node_id].node
        if not self.actions(node.pre_actions, node_id):
            return None
        if node.greeting:
            self.effects.append(Say(text=self.render(node.greeting), allow_interrupt=node.allow_interrupt))
        if not self.actions(node.post_actions, node_id):
            return None
        caller = self.call.subflows[-1].node
        result = pop(self.call, node_id)
        t = self.flow.nodes[caller].node.transition_to
        try:
            target = self.route(t, result, caller)
        except BranchError:
            target = t.default if isinstance(t, BranchTable) else None
        if target is None:  # validation requires a way on; a hand-built definition
            self.end("error")
        return target

    # --- values still being extracted (callflow/reads.py) -----------------------------
    def blocked(self, names: frozenset[str]) -> bool:
        """Whether something reading ``names`` must wait: an extraction still running gives one."""
        return bool(waits_for(self.flow, self.call.extracting, names))

    def wait(self, node_id: str, from_node: str | None, speech: str | None, resuming: bool = False) -> None:
        """Pause the entry until the extraction's result (``resume``). The caller is not left
        in silence: the transition's speech was said, or the flow's ``wait_speech`` is."""
        if self.call.waiting is None and not any(isinstance(e, Say) for e in self.effects):
            self.effects.append(Say(text=self.settings.wait_speech, allow_interrupt=False))
        self.call.waiting = Waiting(node=node_id, from_node=from_node, speech=speech, resuming=resuming)

    def resume(self) -> None:
        """An extraction ended: an entry that waited for it goes on, or waits on for another."""
        w = self.call.waiting
        if w is not None and not self.call.ended and self.call.node == w.node:
            self.go(w.node, w.from_node, w.speech, arrived=True, resuming=w.resuming)

    def show_node(self, node_id: str, from_node: str | None, resuming: bool = False) -> None:
        cn = self.flow.nodes[node_id]
        node = cn.node
        set_node = compose(self.flow, self.call, node_id)
        self.effects.append(set_node)
        if resuming:  # back from a digression: its actions ran and its greeting was said already
            self.effects.append(_RESUME_TURN)
            return
        if not self.actions(node.pre_actions, node_id):
            return
        opening = (
            self.call.journey.say if self.call.journey is not None and len(self.call.path) == 1 else None
        )
        if opening and from_node is None:  # a journey's call: its first words, instead of the greeting
            self.effects.append(Say(text=self.render(opening), allow_interrupt=node.allow_interrupt))
        elif set_node.greeting and from_node != node_id:
            self.effects.append(Say(text=set_node.greeting, allow_interrupt=node.allow_interrupt))
        elif node.respond_immediately or node.type == "end":
            self.effects.append(_ENTER_TURN)
        if not self.actions(node.post_actions, node_id):
            return
        if node.type == "end":
            self.end("completed")

    def actions(self, actions: list[Action], node_id: str) -> bool:
        """Emit pre/post actions; False when one of them ended the call."""
        allow = self.flow.nodes[node_id].node.allow_interrupt
        for act in actions:
            if act.tts_say is not None:
                self.effects.append(Say(text=self.render(act.tts_say), allow_interrupt=allow))
            elif act.function is not None:
                self.run_side_effect(act.function, node_id)
            elif act.end_conversation is not None:
                self.end("completed", goodbye=self.render(act.end_conversation) or None)
                return False
        return True

    def leave(self, node_id: str) -> None:
        node = self.flow.nodes[node_id].node
        if node.extract:
            xid = f"{node_id}#{self.call.visits.get(node_id, 0)}"
            self.call.extracting = [*self.call.extracting, xid]
            self.effects.append(Extract(node=node_id, fields=list(node.extract), id=xid))

    def end(self, reason: EndReason, goodbye: str | None = None) -> None:
        if self.call.ended:
            return
        node = self.flow.nodes[self.call.node].node if self.call.node in self.flow.nodes else None
        unwind(self.call)  # ended inside a subflow: the record holds the calling flow's values
        self.call.ended = True
        self.call.waiting = None
        self.call.end_reason = reason
        self.call.disposition = disposition_of(self.call.extracted, node, reason)
        if self.call.node is not None:
            self.leave(self.call.node)
        if goodbye:
            self.effects.append(Say(text=goodbye, allow_interrupt=False))
        self.effects.append(EndCall(reason=reason, disposition=self.call.disposition))

    def transition_after(
        self, t: Transition | None, result: Any, from_node: str, speech: str | None
    ) -> tuple[bool, str | None]:
        """(moved, error for the LLM)."""
        try:
            target = self.route(t, result, from_node)
        except BranchError as exc:
            return False, str(exc)
        if target is None:
            return False, None
        self.enter(target, from_node, speech)
        return True, None
