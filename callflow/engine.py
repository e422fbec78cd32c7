"""The call engine: ``(state, event) -> (state, effects)``, pure and deterministic.

No I/O, no clock, no randomness: the Temporal workflow and the LiveKit agent both
run it on the same events and must reach the same state. It never raises on an
event; anything it cannot apply comes back as a ``Rejected`` effect (or, for the
LLM's mistakes, an error ``ToolResponse``) with the state unchanged, except that a
refused function call of the LLM is counted (``CallState.refused``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ringflow.callflow.compiled import CompiledFlow, CompiledFunction, compiled_for
from ringflow.callflow.compose import compose, template_values
from ringflow.callflow.digressions import offered, refusal
from ringflow.callflow.dispositions import disposition_of
from ringflow.callflow.draft import Draft
from ringflow.callflow.effects import Effect, EndCall, LLMTurn, Rejected, Say, SetNode, ToolResponse
from ringflow.callflow.end_reasons import EndReason
from ringflow.callflow.events import (
    EVENT_ADAPTER,
    CallStarted,
    DtmfEntered,
    Event,
    ExtractionResult,
    FunctionCalled,
    FunctionResult,
    HangUp,
    JobsFinished,
    MachineAnswered,
    MaxDuration,
    SupervisorAction,
    UserIdle,
    UserSpoke,
)
from ringflow.callflow.idle import idle_instructions
from ringflow.callflow.inputs import resolve_variables, type_ok
from ringflow.callflow.jobs import routes, start_effect
from ringflow.callflow.model import BranchTable, FlowDefinition
from ringflow.callflow.safe_text import has_unsafe, scrub
from ringflow.callflow.state import CallState, extraction_node
from ringflow.callflow.subflows import add_extracted

RESPONSES = ("transition_in_yaml", "no_response")
# The fields of each event that carry text from outside (callers, LLMs, handlers, servers):
# only these are checked for NUL and lone surrogates, so the hot path pays a lookup.
_FREE_TEXT: dict[str, tuple[str, ...]] = {
    "call_started": ("variables", "caller_number", "called_number"),
    "function_called": ("args",),
    "function_result": ("result", "error", "state"),
    "extraction_result": ("values", "error"),
    "jobs_finished": ("result",),
}
IDLE_INSTRUCTIONS = idle_instructions("silence", 1, 2, "end")  # the default flow's first re-prompt


# a tuple, not a union built per call: this check runs on every event
_EVENT_TYPES = (
    CallStarted,
    FunctionCalled,
    FunctionResult,
    ExtractionResult,
    UserSpoke,
    UserIdle,
    HangUp,
    MaxDuration,
    DtmfEntered,
    MachineAnswered,
    JobsFinished,
    SupervisorAction,
)
# The bot's first turn when a supervisor hands the call back on the node it was on.
HANDBACK_INSTRUCTIONS = (
    "A supervisor spoke with the caller while you were paused and has handed the call back "
    "to you; their conversation is above (their lines start with [supervisor]). Carry on "
    "from where they left off in one short turn: do not greet the caller again."
)
TAKEN_OVER = "a supervisor has the call: wait for the hand-back"


@dataclass(frozen=True)
class Step:
    state: CallState
    effects: list[Effect]


class Engine:
    def __init__(self, definition: FlowDefinition | CompiledFlow) -> None:
        self.flow = definition if isinstance(definition, CompiledFlow) else compiled_for(definition)
        self.definition = self.flow.definition

    # --- public -----------------------------------------------------------------------
    def start(self, event: CallStarted) -> Step:
        return self.apply(CallState(), event)

    def apply(self, state: CallState, event: Event | dict[str, Any]) -> Step:
        if not isinstance(event, _EVENT_TYPES):
            try:
                event = EVENT_ADAPTER.validate_python(event)
            except ValidationError as exc:
                first = exc.errors(include_url=False)[0]
                where = ".".join(str(p) for p in first["loc"])
                return Step(state, [Rejected(reason=f"malformed event: {where}: {first['msg']}")])
        free = _FREE_TEXT.get(event.type)
        if free and any(has_unsafe(getattr(event, f)) for f in free):
            # A NUL or a lone surrogate (from an LLM, a handler, a caller's input) would be
            # kept in the state and refused by every store: both sides replace it the same way.
            event = type(event).model_validate(scrub(event.model_dump()))
        if state.node is not None and state.node not in self.flow.nodes:
            return self._reject(
                state,
                f"the state is on node '{state.node}', which flow "
                f"'{self.definition.flow.flow}' does not have",
            )
        handler: Callable[[CallState, Any], Step] = getattr(self, f"_on_{event.type}")
        try:
            return handler(state, event)
        except Exception as exc:  # a bug must not take a live call down with it
            return Step(state, [Rejected(reason=f"internal error: {type(exc).__name__}: {exc}")])

    def snapshot(self, state: CallState) -> SetNode | None:
        """The current node's prompt and tools, rebuilt from the state alone (resume)."""
        if state.node is None or self.flow.nodes[state.node].node.type not in ("agent", "end"):
            return None
        if state.waiting is not None:  # not entered yet: its prompt reads values still coming
            return None
        return compose(self.flow, state, state.node)

    def arrival(self, state: CallState) -> list[Effect]:
        """What entering the call's current node says and shows, for an agent that did not
        take that step itself: the workflow routed the call there through an action node
        (a function only the workflow runs). It is the same ``show_node`` the step ran,
        replayed from the state it left: node, tools, ``pre_actions`` speech, greeting or
        LLM turn, ``post_actions``, and an end node's end. Nothing durable is ordered again
        (the workflow ran the ``function:`` actions and extractions): only what the caller
        hears and what the LLM gets. A call that ended any other way just ends.
        """
        if state.node is None:
            return []
        if state.ended and state.end_reason != "completed":
            return [EndCall(reason=state.end_reason or "completed", disposition=state.disposition)]
        if state.waiting is not None:  # the extraction's result shows it (Draft.resume)
            return []
        if self.flow.nodes[state.node].node.type not in ("agent", "end"):
            # still on an action node (its run has not settled): nothing to show yet
            return (
                [EndCall(reason=state.end_reason or "completed", disposition=state.disposition)]
                if state.ended
                else []
            )
        d = Draft(self.flow, state.model_copy(update={"ended": False, "end_reason": None}), None)
        before = state.path[-2] if len(state.path) > 1 else None
        d.show_node(state.node, before)
        return [e for e in d.effects if type(e) in (SetNode, Say, LLMTurn, EndCall)]

    def opening(self, state: CallState) -> list[Effect]:
        """What an agent says and shows to open a fresh call: ``arrival`` on the start node,
        after the recording announcement when the flow has one."""
        effects = self.arrival(state)
        return self.announced(state, effects) if len(state.path) <= 1 and not state.transitions else effects

    def announced(self, state: CallState, effects: list[Effect]) -> list[Effect]:
        """``effects`` with the flow's recording announcement (``recording.consent.say``) first
        after the node is shown: before anything the first node says, so the caller hears it
        before the first turn (and before a ``record_after_consent`` ask)."""
        rec = self.definition.flow.recording
        if rec is None or not rec.enabled or rec.consent is None:
            return effects
        text = Draft(self.flow, state, None).render(rec.consent.say)
        at = next((i + 1 for i, e in enumerate(effects) if isinstance(e, SetNode)), 0)
        return [*effects[:at], Say(text=text, allow_interrupt=False), *effects[at:]]

    # --- events -----------------------------------------------------------------------
    def _reject(self, state: CallState, reason: str) -> Step:
        return Step(state, [Rejected(reason=reason)])

    def _on_call_started(self, state: CallState, ev: CallStarted) -> Step:
        if state.node is not None or state.ended:
            return self._reject(state, "the call has already started")
        flow = self.definition.flow
        values, issues = resolve_variables(flow, ev.variables)
        if issues:
            return self._reject(state, "; ".join(str(i) for i in issues))
        d = Draft(self.flow, state, ev.at)
        d.call.call_id, d.call.flow, d.call.version = ev.call_id, flow.flow, flow.version
        d.call.variables = values
        d.call.caller_number, d.call.called_number = ev.caller_number, ev.called_number
        d.call.started_at = ev.at
        start = flow.start_node
        if ev.journey is not None:  # a journey's call: where and with what the journey says
            j = ev.journey
            if j.node is not None and j.node not in self.flow.nodes:
                return self._reject(
                    state, f"the journey starts on node '{j.node}', which the flow does not have"
                )
            start = j.node or start
            d.call.state, d.call.extracted, d.call.journey = dict(j.state), dict(j.extracted), j.context
        d.enter(start, None)
        return Step(d.call, self.announced(d.call, d.effects))

    def _on_function_called(self, state: CallState, ev: FunctionCalled) -> Step:
        """The LLM's call, counted in ``CallState.refused`` when the flow refuses it (a function
        the node does not offer, arguments it does not take, a digression it does not allow, a
        transition that cannot be taken); not when the moment refuses it (the call has ended,
        its entry waits for values, a supervisor has it). Both engines apply the same calls
        (the agent reports its refusals too), so the count is the call's on both sides, and a
        canary compares versions by it."""
        step = self._function_called(state, ev)
        if (
            step.state is state
            and not (state.ended or state.takeover or state.waiting is not None)
            and any(isinstance(e, ToolResponse) and e.error for e in step.effects)
        ):
            return Step(state.model_copy(update={"refused": state.refused + 1}), step.effects)
        return step

    def _function_called(self, state: CallState, ev: FunctionCalled) -> Step:
        if state.node is None:
            return self._reject(state, "the call has not started")
        if ev.node is not None and ev.node != state.node:
            return self._reject(
                state,
                f"function '{ev.name}' was called on node '{ev.node}' but the call is on '{state.node}'",
            )
        cnode = self.flow.nodes[state.node]
        if cnode.node.type not in ("agent", "end"):
            return self._reject(state, f"node '{state.node}' is a {cnode.node.type} node: no LLM runs there")
        if state.waiting is not None:
            return Step(state, [_llm_error(ev.name, "wait: the call is still entering this node")])
        if state.takeover:
            return Step(state, [_llm_error(ev.name, TAKEN_OVER)])
        if state.ended and cnode.node.type != "end":
            return Step(state, [_llm_error(ev.name, "the call has ended")])
        fn = cnode.functions.get(ev.name)
        if fn is not None and fn.kind in ("global_node", "go_back"):
            return self._digression(state, ev, fn)
        if fn is None:
            valid = [n for n in cnode.functions if n not in cnode.dynamic and n not in cnode.hidden]
            valid += offered(self.flow, state, state.node)
            return Step(
                state,
                [
                    ToolResponse(
                        name=ev.name,
                        error=True,
                        result={
                            "status": "error",
                            "error": f"unknown function '{ev.name}'; call one of: {', '.join(valid) or 'none'}",  # noqa: E501
                            "valid_functions": valid,
                        },
                    )
                ],
            )
        args, problem = fn.check_args(ev.args)
        if problem is not None or args is None:
            return Step(state, [_llm_error(ev.name, problem or "invalid arguments")])
        d = Draft(self.flow, state, ev.at)
        entry = fn.entry
        if fn.kind == "jobs":  # started in the background: the LLM is answered at once
            d.call.seq += 1
            start, answer = start_effect(
                self.definition, fn, state.node, args, d.call.seq, template_values(d.call)
            )
            return Step(d.call, [start, answer])
        if fn.kind in ("handler", "http", "mcp", "transfer", "knowledge"):
            d.run_function(fn, state.node, args, "tool")
            return Step(d.call, d.effects)
        if fn.kind == "capture":
            d.put_state(entry.name, args)
        result: dict[str, Any] = (
            {"status": "ok", "captured": args} if fn.kind == "capture" else {"status": "ok"}
        )
        if fn.kind == "send_dtmf":  # the agent presses them on the line; nothing moves
            result = {"status": "ok", "pressed": args.get("digits")}
        marker = len(d.effects)
        moved, error = d.transition_after(entry.transition_to, args, state.node, entry.speech)
        if error:
            return Step(state, [_llm_error(ev.name, error)])
        d.effects.insert(marker, ToolResponse(name=ev.name, result=result, run_llm=not moved))
        return Step(d.call, d.effects)

    def _digression(self, state: CallState, ev: FunctionCalled, fn: CompiledFunction) -> Step:
        """Into a global node, or (``go_back``) out of it: refused, with the reason for the
        LLM, when the call's state does not offer it now (``callflow/digressions.py``)."""
        node = state.node or ""
        problem = refusal(self.flow, state, node, ev.name)
        if problem is None:
            _args, problem = fn.check_args(ev.args)
        if problem is not None:
            return Step(state, [_llm_error(ev.name, problem)])
        d = Draft(self.flow, state, ev.at)
        if fn.kind == "global_node":
            d.digress(ev.name, node)
        else:
            d.go_back(node)
        d.effects.insert(0, ToolResponse(name=ev.name, result={"status": "ok"}, run_llm=False))
        return Step(d.call, d.effects)

    def _on_function_result(self, state: CallState, ev: FunctionResult) -> Step:
        run = state.pending.get(str(ev.run_id))
        if run is None:
            return self._reject(
                state, f"no function run {ev.run_id} is pending (a duplicate or a stale result)"
            )
        d = Draft(self.flow, state, ev.at)
        d.pop_pending(ev.run_id)
        if ev.state is not None:
            d.set_state(ev.state)
        if run.purpose == "side_effect":
            return Step(d.call, d.effects)
        if run.purpose == "action_node":
            return self._action_result(d, run.node, ev)
        if ev.error is not None:
            d.effects.append(_llm_error(run.name, ev.error))
            return Step(d.call, d.effects)
        if ev.response not in RESPONSES:
            d.effects.append(
                _llm_error(
                    run.name,
                    f"handler '{run.name}' returned {ev.response!r} as "
                    "its second value; return TRANSITION_IN_YAML or "
                    "NO_RESPONSE",
                )
            )
            return Step(d.call, d.effects)
        speak = ev.response != "no_response"
        if d.call.ended or d.call.node != run.node:
            d.effects.append(ToolResponse(name=run.name, result=ev.result, run_llm=False))
            return Step(d.call, d.effects)
        fn = self.flow.nodes[run.node].functions.get(run.name)
        entry = fn.entry if fn is not None else None
        if entry is not None and entry.transfer is not None:
            return self._transfer_result(d, run.node, run.name, entry.transfer.fallback, ev.result)
        marker = len(d.effects)
        moved, error = (
            (False, None)
            if entry is None
            else d.transition_after(entry.transition_to, ev.result, run.node, entry.speech)
        )
        if error:
            d.effects.append(_llm_error(run.name, error))
            return Step(d.call, d.effects)
        d.effects.insert(marker, ToolResponse(name=run.name, result=ev.result, run_llm=speak and not moved))
        return Step(d.call, d.effects)

    def _transfer_result(self, d: Draft, node: str, name: str, fallback: str | None, result: Any) -> Step:
        """A transfer ran: handed over, the call is over (``transferred``); not, the caller
        goes to ``fallback`` (or the LLM hears why and carries on)."""
        done = isinstance(result, dict) and result.get("status") == "transferred"
        if done:
            d.effects.append(ToolResponse(name=name, result=result, run_llm=False))
            d.end("transferred")
        elif fallback is not None:
            d.effects.append(ToolResponse(name=name, result=result, run_llm=False))
            d.enter(fallback, node)
        else:
            d.effects.append(ToolResponse(name=name, result=result, run_llm=True))
        return Step(d.call, d.effects)

    def _action_result(self, d: Draft, node_id: str, ev: FunctionResult) -> Step:
        node = self.flow.nodes[node_id].node
        if d.call.ended or d.call.node != node_id:
            return Step(d.call, d.effects)
        # A failed run is routed like any result, as the object a handler's exception
        # becomes (spec: the call goes on): a case 'error', the default, or a plain target.
        result = ev.result if ev.error is None else {"status": "error", "error": ev.error}
        if node.save_as:
            d.put_state(node.save_as, result)
        t = node.transition_to
        moved, error = d.transition_after(t, result, node_id, None)
        if not moved and error is not None and isinstance(t, BranchTable) and t.default is not None:
            d.enter(t.default, node_id)  # no LLM here to tell: a result without the field takes the default
            moved = True
        if not moved:  # no LLM on an action node to stay with: nowhere to go is an error
            d.end("error")
        return Step(d.call, d.effects)

    def _on_extraction_result(self, state: CallState, ev: ExtractionResult) -> Step:
        """A node's values (or, with ``error``, none: the fallback every reader then takes,
        a template's ``| default`` and a gate's ``default``). It ends the extraction it
        answers and resumes an entry that waited for it (``Draft.wait``)."""
        if ev.node not in self.flow.nodes:
            return self._reject(state, f"extraction for unknown node '{ev.node}'")
        xid = (
            ev.id
            if ev.id is not None
            else next((x for x in state.extracting if extraction_node(x) == ev.node), None)
        )
        running = xid is not None and xid in state.extracting
        if ev.id is not None and not running:
            return self._reject(state, f"no extraction '{ev.id}' is running (a duplicate or a stale result)")
        if ev.error is not None and not running:
            return self._reject(state, f"extraction for '{ev.node}' failed: {ev.error}")
        specs = {x.name: x for x in self.flow.nodes[ev.node].node.extract}
        values = {} if ev.error is not None else ev.values
        kept = {
            k: v
            for k, v in values.items()
            if k in specs
            and type_ok(specs[k].type, v)
            and ((enum := specs[k].enum) is None or v is None or v in enum)
        }
        dropped = sorted(set(values) - set(kept))
        d = Draft(self.flow, state, ev.at)
        add_extracted(d.call, ev.node, kept)  # into the scope of its node (callflow/subflows.py)
        if running:
            rest = list(state.extracting)
            rest.remove(xid)  # type: ignore[arg-type]
            d.call.extracting = rest
        if state.ended and state.node is not None:  # the last node's values may decide the outcome
            d.call.disposition = disposition_of(
                d.call.extracted, self.flow.nodes[state.node].node, state.end_reason
            )
        if dropped:
            d.effects.append(
                Rejected(
                    reason=f"extraction for '{ev.node}': ignored undeclared or ill-typed values {dropped}"
                )
            )
        d.resume()
        return Step(d.call, d.effects)

    def _on_user_spoke(self, state: CallState, ev: UserSpoke) -> Step:
        if state.idle_count == 0 and ev.at is None:
            return Step(state, [])
        d = Draft(self.flow, state, ev.at)
        d.call.idle_count = 0
        return Step(d.call, [])

    def _on_user_idle(self, state: CallState, ev: UserIdle) -> Step:
        """Silence, speech with no words, or an empty push-to-talk turn: each counts toward
        the idle rule (``prompts`` re-prompts, then give up); real speech resets the count.
        Giving up ends the call, or with ``on_give_up: wait`` leaves it open and quiet: the
        count stops at the give-up mark (bounded state) until the caller speaks again."""
        if state.ended or state.node is None:
            return self._reject(state, "no live call to be idle in")
        if state.waiting is not None:  # the wait speech was said: the call is not idle, it waits
            return Step(state, [])
        if state.takeover:  # the flow's timers pause while a supervisor has the call
            return Step(state, [])
        idle = self.definition.flow.settings.idle
        d = Draft(self.flow, state, ev.at)
        d.call.idle_count = min(state.idle_count + 1, idle.prompts + 1)
        if d.call.idle_count <= idle.prompts:
            d.effects.append(
                LLMTurn(
                    reason="idle",
                    instructions=idle_instructions(ev.kind, d.call.idle_count, idle.prompts, idle.on_give_up),
                )
            )
        elif idle.on_give_up == "end":
            d.end("user_idle", goodbye=d.render(idle.goodbye))
        return Step(d.call, d.effects)

    def _on_hangup(self, state: CallState, ev: HangUp) -> Step:
        return self._finish(state, ev.reason, ev.at)

    def _on_dtmf_entered(self, state: CallState, ev: DtmfEntered) -> Step:
        """Keys the caller pressed, collected by the agent on ``ev.node``. On a node with a
        ``dtmf`` spec they are its result ``{field: digits}``, kept in the state under
        ``field`` and routed by ``transition_to`` like a capture's arguments; elsewhere they
        change nothing here (the agent shows them to the LLM)."""
        if state.node is None or state.ended:
            return self._reject(state, "keys pressed outside a live call")
        if state.waiting is not None:
            return self._reject(state, f"keys pressed while the call waits to enter '{state.node}'")
        if ev.node is not None and ev.node != state.node:
            return self._reject(
                state, f"keys collected on node '{ev.node}' but the call is on '{state.node}'"
            )
        spec = self.flow.nodes[state.node].node.dtmf
        if spec is None or state.takeover:  # keys pressed to the supervisor route nothing
            return Step(state, [])
        d = Draft(self.flow, state, ev.at)
        d.put_state(spec.field, ev.digits)
        _moved, error = d.transition_after(spec.transition_to, {spec.field: ev.digits}, state.node, None)
        if error:
            return self._reject(state, f"keys {ev.digits!r}: {error}")
        return Step(d.call, d.effects)

    def _on_machine_answered(self, state: CallState, ev: MachineAnswered) -> Step:
        """A machine answered: the flow's ``settings.voicemail.node`` (an end node: its greeting
        or task is the message), else the call ends ``voicemail``."""
        if state.node is None or state.ended:
            return self._reject(state, "an answering machine outside a live call")
        d = Draft(self.flow, state, ev.at)
        d.put_state("answered_by", "machine")
        voicemail = self.definition.flow.settings.voicemail
        if voicemail is None:
            d.end("voicemail")
        else:
            d.enter(voicemail.node, state.node)
        return Step(d.call, d.effects)

    def _on_jobs_finished(self, state: CallState, ev: JobsFinished) -> Step:
        """A job group is done: its result is kept under the entry's name; on the node that
        started it, ``transition_to`` routes on the outcome (see ``callflow/jobs.py``)."""
        d = Draft(self.flow, state, ev.at)
        d.put_state(ev.name, ev.result)
        cnode = self.flow.nodes.get(ev.node)
        fn = cnode.functions.get(ev.name) if cnode is not None else None
        if state.ended or state.node != ev.node or fn is None:
            return Step(d.call, d.effects)
        t = fn.entry.transition_to
        if not routes(t, ev.result.get("outcome")):
            return Step(d.call, d.effects)
        _moved, error = d.transition_after(t, ev.result, ev.node, fn.entry.speech)
        if error:
            d.effects.append(Rejected(reason=f"group {ev.group_id}: {error}"))
        return Step(d.call, d.effects)

    def _on_supervisor(self, state: CallState, ev: SupervisorAction) -> Step:
        """A supervisor's whisper, takeover or hand-back (``SupervisorAction``). A whisper
        changes nothing here (the agent's LLM context takes it); a takeover pauses the flow
        (no tools, no idle rule, no key routing) until the hand-back, which shows the node
        the bot was on with a turn that carries on, or enters the node the supervisor chose
        as any transition does (its extraction, greeting, path)."""
        if ev.id <= state.supervisor_seen:
            return Step(state, [])  # applied already: a successor agent met it again
        if state.node is None or state.ended:
            return self._reject(state, f"supervisor {ev.action} outside a live call")
        target = ev.node or state.node
        if ev.action == "handback" and target not in self.flow.nodes:
            return self._reject(state, f"hand-back at node '{target}', which the flow does not have")
        d = Draft(self.flow, state, ev.at)
        d.call.supervisor_seen = ev.id
        if ev.action == "takeover":
            d.call.takeover = True
            d.call.idle_count = 0
        elif ev.action == "handback" and state.takeover:
            d.call.takeover = False
            d.call.idle_count = 0
            if target != state.node:
                d.enter(target, state.node)
                if not any(type(e) in (Say, LLMTurn) for e in d.effects) and not d.call.ended:
                    d.effects.append(LLMTurn(reason="handback", instructions=HANDBACK_INSTRUCTIONS))
            elif state.waiting is None:  # (an entry waiting for values is shown by their result)
                shown = compose(self.flow, d.call, target).model_copy(update={"context": "append"})
                d.effects += [shown, LLMTurn(reason="handback", instructions=HANDBACK_INSTRUCTIONS)]
        return Step(d.call, d.effects)

    def _on_max_duration(self, state: CallState, ev: MaxDuration) -> Step:
        return self._finish(state, "max_duration", ev.at)

    def _finish(self, state: CallState, reason: EndReason, at: float | None) -> Step:
        if state.ended:
            return self._reject(state, f"the call has already ended ({state.end_reason})")
        d = Draft(self.flow, state, at)
        d.end(reason)
        return Step(d.call, d.effects)


def _llm_error(name: str, message: str) -> ToolResponse:
    return ToolResponse(name=name, error=True, result={"status": "error", "error": message})
