"""Loading the flows ``subflow`` nodes use, checking them, and inlining their nodes.

A ``subflow`` node names another flow (``use: flows/verify_identity.yaml``, beside the
flow file, or ``use: NAME@VERSION``, a published version). That flow is read and validated
on its own, as any flow (its own ``use`` too, with a cycle refused), then its nodes are
copied into the calling flow's definition under ``<node>.`` with their transitions renamed
to match (``verify.ask_dob``), and a :class:`SubflowSpec` records where it starts, what
inputs it takes and which content it was. The definition a call runs thus holds everything:
no file or store is read to enter a subflow (the workflow cannot), the agent and the
workflow hold the same nodes, and a published version is the calling flow *with* its
subflows' content, so changing a used flow gives the caller a new version id.

The used flow's nodes keep their own ``role`` (placed before their task), take the used
flow's ``global_functions`` as their own, and are offered no global nodes (a digression
is the calling flow's, in the calling flow's values). A used file's ``handlers`` module
comes along: it is imported from beside the used file (when the calling flow's is), its
specs are inlined under ``<node>.<name>`` and its functions run from it
(``callflow/subflow_handlers.py``). What does not travel is refused or said: a published
version's handlers module (no file to find it beside), MCP servers of the used flow (the
call pins the calling flow's servers' tools when it starts, and only those), global nodes
in it; its settings, recording, analysis and journey are the calling flow's business and
are ignored with a warning.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ringflow.callflow.errors import Issue
from ringflow.callflow.model import (
    BranchTable,
    Flow,
    FlowDefinition,
    FunctionEntry,
    HandlerSpec,
    Node,
    SubflowSpec,
    Transition,
)
from ringflow.callflow.subflows import SEP
from ringflow.callflow.voice import NO_VOICE, VoiceSettings, voice_for

FILE_SUFFIXES = (".yaml", ".yml", ".json")
MAX_DEPTH = 8  # subflows inside subflows: deeper is a mistake, not a design
# A published version by reference, NAME@VERSION (or NAME@CHANNEL, read once, at load):
# its definition and version id; raises LookupError saying what exists.
VersionSource = Callable[[str], tuple[FlowDefinition, str]]
_IGNORED = ("settings", "recording", "analysis", "journey")


@dataclass(frozen=True)
class Used:
    """A flow a ``subflow`` node uses, validated, its own subflows already inlined."""

    ref: str
    definition: FlowDefinition
    digest: str

    @property
    def flow(self) -> Flow:
        return self.definition.flow

    def extracted_names(self) -> set[str]:
        """Every value its nodes extract: its outputs, known to the calling flow's templates."""
        return {x.name for n in self.flow.nodes.values() for x in n.extract}

    def end_nodes(self) -> list[str]:
        """Its own end nodes (not those of subflows it uses): where it returns from."""
        return [nid for nid, n in self.flow.nodes.items() if n.type == "end" and SEP not in nid]


def is_version_ref(ref: str) -> bool:
    """``NAME@VERSION`` rather than a file: an ``@``, no slash, no flow file suffix."""
    return "@" in ref and "/" not in ref and not ref.endswith(FILE_SUFFIXES)


def digest_of(definition: FlowDefinition) -> str:
    """12 hex digits of the SHA-256 of the used flow's definition (without where it was read)."""
    data = definition.model_dump(mode="json", by_alias=True)
    data.pop("source", None)
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


class Report(Protocol):
    """What reading a used file gives (the loader's ``ValidationReport``)."""

    errors: list[Issue]
    warnings: list[Issue]
    definition: FlowDefinition | None


# Reads and validates a used file: (path, the files being read that led here, versions,
# whether to import its handlers module) -> its report. The loader passes its own, so this
# module does not import the loader.
ReadFile = Callable[[Path, tuple[str, ...], VersionSource | None, bool], Report]


def load_uses(
    flow: Flow,
    base_dir: Path | None,
    chain: tuple[str, ...],
    versions: VersionSource | None,
    read: ReadFile,
    load_handlers: bool = True,
) -> tuple[dict[str, Used], list[Issue], list[Issue]]:
    """The flow each ``subflow`` node uses, by node id; errors and warnings, each at the
    node's ``use`` and naming the used file (and the path of the problem inside it). A used
    file's handlers module is imported and its functions checked when ``load_handlers``."""

    used: dict[str, Used] = {}
    errors: list[Issue] = []
    warnings: list[Issue] = []
    for nid, node in flow.nodes.items():
        if node.type != "subflow" or not node.use:
            continue
        path = f"nodes.{nid}.use"
        ref = node.use
        if is_version_ref(ref):
            if versions is None:
                errors.append(
                    Issue(
                        path,
                        f"'{ref}' names a published version, and no flow store is at hand here "
                        "(RINGFLOW_DATABASE_URL): use the flow's file instead",
                    )
                )
                continue
            try:
                definition, digest = versions(ref)
            except LookupError as exc:
                errors.append(Issue(path, f"subflow '{ref}': {exc}"))
                continue
        else:
            if base_dir is None:
                errors.append(
                    Issue(
                        path,
                        f"subflow file '{ref}' is found beside the flow's file, and this flow "
                        "was given without one: use NAME@VERSION",
                    )
                )
                continue
            file = (base_dir / ref).resolve()
            if str(file) in chain:
                cycle = " -> ".join([*(Path(c).name for c in chain[chain.index(str(file)) :]), file.name])
                errors.append(Issue(path, f"subflows use each other in a cycle: {cycle}"))
                continue
            if len(chain) > MAX_DEPTH:
                errors.append(Issue(path, f"subflows nested more than {MAX_DEPTH} deep"))
                continue
            try:
                report = read(file, (*chain, str(file)), versions, load_handlers)
            except FileNotFoundError:
                errors.append(Issue(path, f"no subflow file '{ref}' (looked for {file})"))
                continue
            if report.definition is None:
                errors += [Issue(path, f"subflow {ref}: {e}") for e in report.errors]
                continue
            warnings += [Issue(path, f"subflow {ref}: {w}", "warning") for w in report.warnings]
            definition = report.definition
            digest = digest_of(definition)
        problems = _travels(ref, definition.flow)
        if problems:
            errors += [Issue(path, p) for p in problems]
            continue
        for key in _IGNORED:
            if key in definition.flow.model_fields_set:
                warnings.append(
                    Issue(
                        path, f"subflow {ref}: its '{key}' does not apply: the calling flow's does", "warning"
                    )
                )
        sub_voice = definition.flow.voice
        if sub_voice is not None and sub_voice.noise_cancellation is not None:
            warnings.append(
                Issue(
                    path,
                    f"subflow {ref}: its 'voice.noise_cancellation' does not apply: it is the call's, "
                    "the calling flow's (its other voice settings apply on its nodes)",
                    "warning",
                )
            )
        used[nid] = Used(ref=ref, definition=definition, digest=digest)
    return used, errors, warnings


def _travels(ref: str, flow: Flow) -> list[str]:
    """What a used flow has that cannot run inside another flow's call."""
    out: list[str] = []
    if flow.handlers and is_version_ref(ref):
        out.append(
            f"subflow {ref} has a handlers module ('{flow.handlers}'): a published version used as "
            "a subflow brings none (its module is found beside a file): use the flow's file"
        )
    if flow.mcp_servers:
        out.append(
            f"subflow {ref} has mcp_servers: a call reaches only the calling flow's MCP servers "
            "(declare them there, and call their tools from the calling flow's nodes)"
        )
    for nid, node in flow.nodes.items():
        if node.global_ is not None:
            out.append(
                f"subflow {ref}: node '{nid}' is a global node: digressions belong to the calling flow"
            )
    return out


def inline(definition: FlowDefinition, used: dict[str, Used]) -> FlowDefinition:
    """``definition`` with each used flow's nodes copied in after its ``subflow`` node, under
    ``<node>.``, the used flow's start node first (so ``flow graph`` finds the entry)."""
    if not used:
        return definition
    nodes: dict[str, Node] = {}
    specs: dict[str, SubflowSpec] = dict(definition.subflows)
    handlers: dict[str, HandlerSpec] = dict(definition.handlers)
    for nid, node in definition.flow.nodes.items():
        nodes[nid] = node
        u = used.get(nid)
        if u is None:
            continue
        sub = u.flow
        prefix = f"{nid}{SEP}"
        start = sub.start_node
        order = [start, *(k for k in sub.nodes if k != start)]
        for sid in order:
            nodes[prefix + sid] = _renamed(sub.nodes[sid], prefix, sub)
        for key, spec in u.definition.subflows.items():  # its own subflows, one level down
            specs[prefix + key] = spec.model_copy(update={"start": prefix + spec.start})
        # its handlers (and its subflows', already qualified) under this node: see handler_key
        handlers.update({prefix + key: spec for key, spec in u.definition.handlers.items()})
        specs[nid] = SubflowSpec(
            use=u.ref,
            flow=sub.flow,
            digest=u.digest,
            start=prefix + start,
            variables=dict(sub.variables),
            handlers=sub.handlers,
        )
    flow = definition.flow.model_copy(update={"nodes": nodes})
    return definition.model_copy(update={"flow": flow, "subflows": specs, "handlers": handlers})


def _target(t: Transition | None, prefix: str) -> Transition | None:
    if t is None:
        return None
    if isinstance(t, str):
        return prefix + t
    return BranchTable(
        field=t.field,
        cases={k: prefix + v for k, v in t.cases.items()},
        default=prefix + t.default if t.default is not None else None,
    )


def _function(fn: FunctionEntry, prefix: str) -> FunctionEntry:
    update: dict[str, Any] = {"transition_to": _target(fn.transition_to, prefix)}
    if fn.transfer is not None and fn.transfer.fallback is not None:
        update["transfer"] = fn.transfer.model_copy(update={"fallback": prefix + fn.transfer.fallback})
    return fn.model_copy(update=update)


def _voice_inside(node: Node, sub: Flow) -> VoiceSettings | None:
    """A used flow's node's voice as the calling flow holds it: its own over its flow's
    ``voice`` (the agent lays that over the calling flow's, so inside the subflow its flow's
    settings apply and what it leaves unset is the caller's). Noise cancellation is the
    call's, set by the calling flow when the session starts: a used flow's is not carried."""
    if sub.voice is None or node.type not in ("agent", "end"):
        return node.voice
    merged = voice_for(sub.voice.model_copy(update={"noise_cancellation": None}), node.voice)
    return None if merged == NO_VOICE else merged


def _renamed(node: Node, prefix: str, sub: Flow) -> Node:
    """A used flow's node as the calling flow holds it: every node it names prefixed, its
    flow's role before its task, its flow's global functions among its own, its flow's
    voice settings under its own."""
    update: dict[str, Any] = {"global_nodes": False if node.type == "agent" else node.global_nodes}
    update["voice"] = _voice_inside(node, sub)
    own = [_function(f, prefix) for f in node.functions]
    if node.type == "agent":
        names = {f.name for f in own}
        own += [_function(f, prefix) for f in sub.global_functions if f.name not in names]
    update["functions"] = own
    if node.type in ("agent", "end"):
        if node.add_role and sub.role:
            update["task"] = f"{sub.role.strip()}\n\n{(node.task or '').strip()}"
        update["add_role"] = False
    update["transition_to"] = _target(node.transition_to, prefix)
    if node.branches:
        update["branches"] = [b.model_copy(update={"to": prefix + b.to}) for b in node.branches]
    if node.default is not None:
        update["default"] = prefix + node.default
    if node.dtmf is not None and node.dtmf.transition_to is not None:
        update["dtmf"] = node.dtmf.model_copy(
            update={"transition_to": _target(node.dtmf.transition_to, prefix)}
        )
    if node.follow_up is not None and node.follow_up.node is not None:
        update["follow_up"] = node.follow_up.model_copy(update={"node": prefix + node.follow_up.node})
    # a node that is itself a subflow inside the used flow keeps its ``use`` and ``inputs``:
    # its spec (re-keyed by ``inline``) already holds what it runs
    return node.model_copy(update=update)
