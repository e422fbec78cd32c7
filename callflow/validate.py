"""The spec's whole-flow rules: everything a shape check cannot see.

Each rule appends issues with the path of the offending element and a hint; no rule
stops the others, so one run of ``flow validate`` shows every problem.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

from ringflow.callflow.errors import Issue, did_you_mean
from ringflow.callflow.graph import (
    adjacency,
    ends_by_action,
    offers_global_nodes,
    reachable,
    strongly_connected,
    targets,
)
from ringflow.callflow.handlers import (
    HandlerModuleError,
    SignatureError,
    get_handler,
    handler_spec,
    load_module,
)
from ringflow.callflow.model import (
    NODE_ID_PATTERN,
    RETURN_TOOL,
    Flow,
    FunctionEntry,
    HandlerSpec,
    Node,
    Transition,
)
from ringflow.callflow.subflow_use import Used
from ringflow.callflow.templating import BUILTINS, TemplateSyntaxError, compile_template, strings_in
from ringflow.callflow.validate_analysis import check_analysis
from ringflow.callflow.validate_gates import GateChecks
from ringflow.callflow.validate_jobs import check_jobs_entry
from ringflow.callflow.validate_knowledge import (
    check_knowledge_entry,
    check_knowledge_node,
    check_knowledge_sources,
)
from ringflow.callflow.validate_mcp import check_mcp_entry, check_mcp_flow
from ringflow.callflow.validate_recording import check_recording
from ringflow.callflow.validate_subflows import check_subflow_node
from ringflow.callflow.validate_voice import check_voice

_NODE_ID = re.compile(NODE_ID_PATTERN)
_LLM_NODE_ONLY = (
    "task",
    "greeting",
    "extract",
    "functions",
    "pre_actions",
    "post_actions",
    "context",
    "listen",
    "voice",
)


_SCHEMA_PROBLEMS: dict[str, tuple[str, str] | None] = {}


def _schema_problem(params: dict[str, Any]) -> tuple[str, str] | None:
    """(path suffix, message) of the first problem of a parameters schema, or None.

    Checking against the JSON Schema meta-schema costs milliseconds, and the same
    schemas come back on every validation of a flow, so the verdicts are remembered.
    jsonschema (tens of milliseconds to import) is imported at the first schema checked: a
    flow whose functions all take their parameters from handlers has none, and ``ringflow
    flow validate`` of it does without (tests/ringflow/test_cli_startup.py).
    """
    key = repr(params)
    if key not in _SCHEMA_PROBLEMS:
        import jsonschema

        try:
            jsonschema.Draft202012Validator.check_schema(params)
            verdict = None
        except jsonschema.SchemaError as exc:
            where = "".join(f".{p}" if isinstance(p, str) else f"[{p}]" for p in exc.path)
            verdict = (where, exc.message)
        if len(_SCHEMA_PROBLEMS) >= 1024:
            _SCHEMA_PROBLEMS.clear()
        _SCHEMA_PROBLEMS[key] = verdict
    return _SCHEMA_PROBLEMS[key]


class _Checker(GateChecks):
    def __init__(
        self,
        flow: Flow,
        base_dir: Path | None,
        load_handlers: bool,
        unsure_nodes: AbstractSet[str] = frozenset(),
        judge_graph: bool = True,
        names: AbstractSet[str] = frozenset(),
        used: Mapping[str, Used] | None = None,
    ) -> None:
        self.flow = flow
        self.used = dict(used or {})  # the flows its subflow nodes use (callflow/subflow_use.py)
        self.base_dir = base_dir
        self.load_handlers = load_handlers
        self.errors: list[Issue] = []
        self.warnings: list[Issue] = []
        self.handlers: dict[str, HandlerSpec] = {}
        self.module: Any = None
        self.node_ids = list(flow.nodes)
        self.known_names = set(flow.variables) | {x.name for n in flow.nodes.values() for x in n.extract}
        self.known_names |= names
        for u in self.used.values():  # a subflow's extracted values are its outputs
            self.known_names |= u.extracted_names()
        # after shape errors (callflow/validate_shape.py): nodes that may reach an end node
        # for all we know, and whether the graph can be judged at all
        self.unsure_nodes = unsure_nodes
        self.judge_graph = judge_graph

    def err(self, path: str, msg: str) -> None:
        self.errors.append(Issue(path, msg))

    def warn(self, path: str, msg: str) -> None:
        self.warnings.append(Issue(path, msg, "warning"))

    # --- references -------------------------------------------------------------------
    def check_target(self, path: str, target: str) -> None:
        if target not in self.flow.nodes:
            self.err(path, f"unknown node '{target}'{did_you_mean(target, self.node_ids)}")

    def check_transition(self, path: str, t: Transition | None) -> None:
        if t is None:
            return
        if isinstance(t, str):
            self.check_target(path, t)
            return
        for key, dst in t.cases.items():
            self.check_target(f"{path}.cases.{key}", dst)
        if t.default is not None:
            self.check_target(f"{path}.default", t.default)
        if not t.cases and t.default is None:
            self.err(path, "a branch table needs at least one case or a default")

    # --- templates --------------------------------------------------------------------
    def check_template(
        self, path: str, text: str | None, extra: AbstractSet[str] = frozenset(), url: bool = False
    ) -> None:
        if not text:
            return
        try:
            tpl = compile_template(text)
        except TemplateSyntaxError as exc:
            self.err(path, str(exc))
            return
        for ph in tpl.placeholders:
            head = ph.path[0]
            if ph.raw and not url:
                self.err(path, f"'{{{{raw:{ph.name}}}}}': 'raw:' applies only in an http entry's url")
            if ph.fallback is not None or head == "state" or head in BUILTINS:
                continue
            if head in self.known_names or head in extra:
                continue
            options = sorted(self.known_names | BUILTINS | extra)
            self.err(
                path,
                f"undefined template variable '{ph.name}'{did_you_mean(head, options)}: "
                "declare it under 'variables', extract it in a node, or give a fallback "
                f"'{{{{{ph.name} | ...}}}}'",
            )

    # --- functions --------------------------------------------------------------------
    def handler(self, path: str, name: str, no_args: bool = False) -> HandlerSpec | None:
        if self.flow.handlers is None:
            self.err(
                path,
                f"'{name}' is a handler entry but the flow names no 'handlers' module "
                "(or mark it transition_only, capture or http)",
            )
            return None
        if self.module is None:
            return None
        fn = get_handler(self.module, name)
        if fn is None:
            names = [n for n in dir(self.module) if not n.startswith("_")]
            self.err(
                path,
                f"handlers module '{self.flow.handlers}' has no function '{name}'{did_you_mean(name, names)}",
            )
            return None
        try:
            spec = handler_spec(fn)
        except SignatureError as exc:
            self.err(path, f"handler '{name}': {exc}")
            return None
        needed = spec.parameters.get("required") or []
        if no_args and needed:
            self.err(
                path,
                f"handler '{name}' is run here with no arguments but requires "
                f"{', '.join(repr(n) for n in needed)}: give them defaults",
            )
        self.handlers[name] = spec
        return spec

    def check_parameters(self, path: str, params: dict[str, Any] | None, required: bool) -> None:
        if params is None:
            if required:
                self.err(path, "required: a JSON Schema object describing the arguments")
            return
        if params.get("type") != "object":
            self.err(f"{path}.type", "parameters must be a JSON Schema with type 'object'")
            return
        problem = _schema_problem(params)
        if problem is not None:
            where, message = problem
            self.err(f"{path}{where}", f"not a valid JSON Schema: {message}")

    def check_function(self, path: str, fn: FunctionEntry, node: Node | None, is_run: bool = False) -> None:
        kinds = [
            k
            for k, on in (
                ("transition_only", fn.transition_only),
                ("capture", fn.capture),
                ("http", fn.http is not None),
                ("send_dtmf", fn.send_dtmf),
                ("mcp", fn.mcp is not None),
                ("transfer", fn.transfer is not None),
                ("jobs", fn.jobs is not None),
                ("knowledge", fn.knowledge is not None),
            )
            if on
        ]
        if len(kinds) > 1:
            self.err(path, f"an entry is one kind only, not {' and '.join(kinds)}")
            return
        kind = fn.kind
        if kind == "transfer" and fn.transfer is not None:
            t = fn.transfer
            if not fn.description:
                self.err(f"{path}.description", "a transfer entry needs a description")
            for key in ("parameters", "transition_to"):
                if getattr(fn, key) is not None:
                    self.err(
                        f"{path}.{key}",
                        f"a transfer entry takes no {key}: it ends the call, or goes to its fallback",
                    )
            if t.mode == "cold" and t.announce:
                self.err(
                    f"{path}.transfer.announce",
                    "only a warm transfer announces the caller: use mode: warm, or remove announce",
                )
            if t.fallback is not None:
                self.check_target(f"{path}.transfer.fallback", t.fallback)
            self.check_template(f"{path}.transfer.to", t.to)
            self.check_template(f"{path}.transfer.announce", t.announce)
            if is_run:
                self.err(path, "an action node runs a handler or an http entry")
            return
        if kind == "jobs":
            check_jobs_entry(self, path, fn, is_run)
            self.check_transition(f"{path}.transition_to", fn.transition_to)
            if node is not None and node.type == "end" and fn.transition_to is not None:
                self.err(f"{path}.transition_to", "an end node may have node functions but no transitions")
            self.check_template(f"{path}.description", fn.description)
            self.check_template(f"{path}.speech", fn.speech)
            return
        if kind == "send_dtmf":
            if not fn.description:
                self.err(f"{path}.description", "a send_dtmf entry needs a description")
            if fn.parameters is not None:
                self.err(
                    f"{path}.parameters",
                    "a send_dtmf entry takes one argument, 'digits', given by Ringflow: remove parameters",
                )
            if fn.transition_to is not None:
                self.err(f"{path}.transition_to", "pressing keys moves nothing: remove transition_to")
            if is_run:
                self.err(path, "an action node runs a handler or an http entry")
            return
        if kind == "knowledge":
            check_knowledge_entry(self, path, fn, self.flow, is_run)
            self.check_transition(f"{path}.transition_to", fn.transition_to)
            self.check_template(f"{path}.description", fn.description)
            self.check_template(f"{path}.speech", fn.speech)
            return
        if is_run and kind not in ("handler", "http"):
            self.err(path, "an action node runs a handler or an http entry")
        if is_run and fn.transition_to is not None:
            self.err(f"{path}.transition_to", "put transition_to on the action node, not on 'run'")
        if kind == "handler":
            for key in ("description", "parameters"):
                if getattr(fn, key) is not None:
                    self.err(
                        f"{path}.{key}",
                        f"a handler entry takes its {key} from the handler's "
                        "signature and docstring: remove it here",
                    )
            self.handler(f"{path}.name", fn.name, no_args=is_run)
        elif kind == "transition_only":
            if not fn.description:
                self.err(f"{path}.description", "a transition-only entry needs a description")
            if fn.transition_to is None:
                self.err(f"{path}.transition_to", "a transition-only entry needs a transition_to node")
            elif not isinstance(fn.transition_to, str):
                self.err(
                    f"{path}.transition_to",
                    "a transition-only entry has no result to branch on: name one node",
                )
            if fn.parameters is not None:
                self.err(
                    f"{path}.parameters",
                    "a transition-only entry takes no parameters (use capture: true to record arguments)",
                )
        elif kind == "mcp":
            check_mcp_entry(self, path, fn)
        else:
            if not fn.description:
                article = "an" if kind == "http" else "a"
                self.err(f"{path}.description", f"{article} {kind} entry needs a description")
            self.check_parameters(f"{path}.parameters", fn.parameters, required=kind == "capture")
        # (a capture's result is its arguments: a branch table on them is allowed, like a handler's)
        self.check_transition(f"{path}.transition_to", fn.transition_to)
        if node is not None and node.type == "end" and fn.transition_to is not None:
            self.err(f"{path}.transition_to", "an end node may have node functions but no transitions")
        props = (fn.parameters or {}).get("properties")
        args: set[str] = set()
        if kind == "http" and isinstance(props, dict):
            args = {k for k in props if isinstance(k, str)}
        self.check_template(f"{path}.description", fn.description)
        self.check_template(f"{path}.speech", fn.speech)
        if fn.http is not None:
            self.check_template(f"{path}.http.url", fn.http.url, args, url=True)
            for arg in sorted(args & (self.known_names | BUILTINS)):
                self.err(
                    f"{path}.parameters.properties.{arg}",
                    f"parameter '{arg}' has the name of a flow value, which wins over an argument "
                    "in the request's templates: rename the parameter",
                )
            for k, v in (fn.http.headers or {}).items():
                self.check_template(f"{path}.http.headers.{k}", v, args)
            for s in strings_in(fn.http.body):
                self.check_template(f"{path}.http.body", s, args)

    # --- nodes ------------------------------------------------------------------------
    def check_node(self, nid: str, node: Node) -> None:
        path = f"nodes.{nid}"
        if not _NODE_ID.match(nid):
            fixed = re.sub(r"[^a-z0-9_]", "_", nid.lower()).lstrip("_0123456789")[:64]
            hint = f" (try '{fixed}')" if fixed else ""
            self.err(
                path,
                f"node id '{nid}' must be lower-case letters, digits and '_', starting with a "
                f"letter, at most 64 characters{hint}",
            )
        given = node.model_fields_set
        if node.type == "subflow":
            check_subflow_node(self, nid, node, self.used.get(nid))
            return
        for key in ("use", "inputs"):
            if key in given:
                self.err(f"{path}.{key}", f"'{key}' applies only to a subflow node (type: subflow)")
        if node.type in ("gate", "action"):
            for key in (*_LLM_NODE_ONLY, "disposition"):
                if key in given:
                    self.err(f"{path}.{key}", f"'{key}' does not apply to a {node.type} node")
        else:
            for key in ("branches", "default", "run", "save_as", "transition_to"):
                if key in given:
                    self.err(f"{path}.{key}", f"'{key}' applies only to gate or action nodes")
            if not node.task:
                self.err(f"{path}.task", f"an {node.type} node needs a task")
            if not node.allow_interrupt and (node.listen or self.flow.settings.listen) == "realtime":
                self.err(
                    f"{path}.allow_interrupt",
                    "a node that listens 'realtime' answers while the "
                    "caller may still be talking: the caller must be able "
                    "to interrupt it (drop allow_interrupt: false, or "
                    "give the node listen: auto)",
                )
        if node.type == "agent" and "disposition" in given:
            self.err(f"{path}.disposition", "only an end node has a disposition")
        if node.follow_up is not None:
            if node.type != "end":
                self.err(
                    f"{path}.follow_up",
                    "only an end node schedules a follow-up (a handler sets state.follow_up)",
                )
            if node.follow_up.node is not None:
                self.check_target(f"{path}.follow_up.node", node.follow_up.node)
            self.check_template(f"{path}.follow_up.say", node.follow_up.say)
        if node.type == "gate":
            if not node.branches:
                self.err(f"{path}.branches", "a gate needs at least one branch")
            for i, br in enumerate(node.branches or []):
                self.check_target(f"{path}.branches[{i}].to", br.to)
                self.check_condition(f"{path}.branches[{i}].when", br.when)
            if node.default is None:
                self.err(f"{path}.default", "a gate needs a default node for when no branch holds")
            else:
                self.check_target(f"{path}.default", node.default)
        if node.type == "action":
            if node.run is None:
                self.err(f"{path}.run", "an action node needs 'run': the function to run")
            else:
                self.check_function(f"{path}.run", node.run, None, is_run=True)
            if node.transition_to is None:
                self.err(f"{path}.transition_to", "an action node needs transition_to")
            self.check_transition(f"{path}.transition_to", node.transition_to)
        if node.dtmf is not None:
            if node.type != "agent":
                self.err(f"{path}.dtmf", "only an agent node collects key presses")
            t = node.dtmf.transition_to
            if t is not None and not isinstance(t, str) and t.field != node.dtmf.field:
                self.err(
                    f"{path}.dtmf.transition_to.field",
                    f"the keys are the result's '{node.dtmf.field}': branch on that field",
                )
            self.check_transition(f"{path}.dtmf.transition_to", t)
        self.check_template(f"{path}.task", node.task)
        self.check_template(f"{path}.greeting", node.greeting)
        self.check_global_node(nid, node)
        check_knowledge_node(self, nid, node, self.flow)
        seen: dict[str, str] = {}
        globals_offered = node.type == "agent"
        if globals_offered:
            for fn in self.flow.global_functions:
                seen.setdefault(fn.name, "global_functions")
        if node.global_ is not None and node.global_.returns:
            seen[RETURN_TOOL] = "go_back"
        if offers_global_nodes(node):
            for gid, g in self.flow.nodes.items():
                if g.global_ is not None and gid != nid:
                    seen.setdefault(gid, "global node")
        for i, fn in enumerate(node.functions):
            fpath = f"{path}.functions[{i}]"
            if fn.name in seen:
                where = {
                    "global_functions": "a global function",
                    "go_back": "the return of this global node",
                    "global node": f"the global node '{fn.name}'",
                }.get(seen[fn.name], "another function")
                self.err(
                    f"{fpath}.name",
                    f"duplicate function name '{fn.name}': {where} on this node "
                    "has the same name; tool names must be unique",
                )
            seen[fn.name] = fpath
            self.check_function(fpath, fn, node)
        names = [x.name for x in node.extract]
        for i, x in enumerate(node.extract):
            if names.index(x.name) != i:
                self.err(f"{path}.extract[{i}].name", f"'{x.name}' is extracted twice in this node")
        for key in ("pre_actions", "post_actions"):
            for i, act in enumerate(getattr(node, key)):
                apath = f"{path}.{key}[{i}]"
                text_key = "tts_say" if act.tts_say is not None else "end_conversation"
                self.check_template(f"{apath}.{text_key}", act.tts_say or act.end_conversation)
                if act.function is not None:
                    self.handler(f"{apath}.function", act.function, no_args=True)

    def check_global_node(self, nid: str, node: Node) -> None:
        """A global node's rules: where it may be, where it returns, and its loop's bound."""
        path = f"nodes.{nid}"
        if "global_nodes" in node.model_fields_set and node.type != "agent":
            self.err(f"{path}.global_nodes", "only an agent node offers global nodes")
        g = node.global_
        if g is None:
            return
        gpath = f"{path}.global"
        if node.type not in ("agent", "end"):
            self.err(gpath, f"a {node.type} node cannot be global: only an agent or end node")
            return
        if node.type == "end" and g.returns:
            self.err(f"{gpath}.return", f"'{nid}' is an end node: the call ends there, it cannot return")
        if isinstance(g.return_, str):
            if g.return_ == nid:
                self.err(
                    f"{gpath}.return",
                    f"global node '{nid}' cannot return into itself: name another node, "
                    "or return: true to go back where the call was",
                )
            else:
                self.check_target(f"{gpath}.return", g.return_)
        if g.return_ is True and nid == self.flow.start_node:
            self.err(f"{gpath}.return", f"'{nid}' is the start node: there is nowhere to go back to")
        if node.type == "agent" and g.max_uses is None and g.cooldown is None:
            self.err(
                gpath,
                f"global node '{nid}' is a loop without a bound: it is offered again where it "
                "leads back to; give it max_uses or a cooldown",
            )
        if not any(offers_global_nodes(n) for other, n in self.flow.nodes.items() if other != nid):
            self.warn(gpath, f"global node '{nid}' is offered nowhere: every agent node opts out")

    # --- graph ------------------------------------------------------------------------
    def check_graph(self) -> None:
        flow = self.flow
        start = flow.start_node
        if start not in flow.nodes:
            self.err("start", f"unknown node '{start}'{did_you_mean(start, self.node_ids)}")
            return
        adj = adjacency(flow)
        exits = {nid for nid, n in flow.nodes.items() if n.type == "end" or ends_by_action(n)}
        exits |= self.unsure_nodes & set(flow.nodes)
        rev: dict[str, set[str]] = {nid: set() for nid in flow.nodes}
        for src, dsts in adj.items():
            for d in dsts:
                rev[d].add(src)
        can_finish: set[str] = set()
        for e in exits:
            can_finish |= reachable(e, rev)
        from_start = reachable(start, adj)
        if not exits & from_start:
            self.err(
                "nodes",
                f"no end node can be reached from the start node '{start}': "
                "add an end node and a transition to it",
            )
        for nid in flow.nodes:
            if nid not in can_finish:
                self.err(
                    f"nodes.{nid}",
                    f"dead end: no end node can be reached from '{nid}'; "
                    "give it a transition towards an end node",
                )
            elif nid not in from_start and not self.unsure_nodes:  # (theirs may lead there)
                self.warn(f"nodes.{nid}", f"unreachable: no transition leads to '{nid}' from start")
        local = adjacency(flow, include_globals=False)
        for comp in strongly_connected(local):
            if len(comp) == 1 and comp[0] not in local[comp[0]]:
                continue
            members = set(comp)
            leaves = any(d not in members for n in comp for d in local[n])
            if not leaves and not members & exits and members <= can_finish:
                cyc = " -> ".join(sorted(comp))
                self.warn(
                    f"nodes.{sorted(comp)[0]}",
                    f"cycle {cyc} has no exit of its own; only global functions or max_node_visits end it",
                )

    def check_flow(self) -> None:
        flow = self.flow
        if flow.handlers and self.load_handlers:
            try:
                self.module = load_module(flow.handlers, self.base_dir)
            except HandlerModuleError as exc:
                self.err("handlers", str(exc))
        self.check_template("role", flow.role)
        self.check_template("settings.idle.goodbye", flow.settings.idle.goodbye)
        self.check_template("settings.wait_speech", flow.settings.wait_speech)
        if flow.journey is not None and flow.journey.callback_node is not None:
            self.check_target("journey.callback_node", flow.journey.callback_node)
        voicemail = flow.settings.voicemail
        if voicemail is not None:
            self.check_target("settings.voicemail.node", voicemail.node)
            if voicemail.node in flow.nodes and flow.nodes[voicemail.node].type != "end":
                self.err(
                    "settings.voicemail.node",
                    "the voicemail node is an end node: its greeting or "
                    "task is the message left after the beep",
                )
        for name, var in flow.variables.items():
            if var.enum is not None and var.default is not None and var.default not in var.enum:
                self.err(f"variables.{name}.default", f"default {var.default!r} is not one of its enum")
            if var.required and var.default is not None:
                self.warn(f"variables.{name}", "required has no effect on a variable with a default")
        gseen: dict[str, int] = {}
        for i, fn in enumerate(flow.global_functions):
            path = f"global_functions[{i}]"
            if fn.name in gseen:
                self.err(f"{path}.name", f"duplicate global function name '{fn.name}'")
            gseen[fn.name] = i
            self.check_function(path, fn, None)
        for nid, node in flow.nodes.items():
            self.check_node(nid, node)
        check_mcp_flow(self, flow)
        check_knowledge_sources(self, flow)
        check_recording(self, flow)
        check_analysis(self, flow)
        check_voice(self, flow)
        if self.judge_graph:
            self.check_graph()
            self.check_gate_waits()


def semantic_checks(
    flow: Flow,
    base_dir: Path | None,
    load_handlers: bool = True,
    *,
    unsure_nodes: AbstractSet[str] = frozenset(),
    judge_graph: bool = True,
    names: AbstractSet[str] = frozenset(),
    used: Mapping[str, Used] | None = None,
) -> tuple[dict[str, HandlerSpec], list[Issue], list[Issue]]:
    """The whole-flow rules. ``unsure_nodes``, ``judge_graph`` and ``names`` describe a
    flow whose bad parts were set aside (``callflow/validate_shape.py``); ``used``, the
    flows its subflow nodes use, by node id."""
    checker = _Checker(flow, base_dir, load_handlers, unsure_nodes, judge_graph, names, used)
    checker.check_flow()
    return checker.handlers, checker.errors, checker.warnings


__all__ = ["semantic_checks", "targets"]
