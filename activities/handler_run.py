"""Running a flow's handler: user code, so it runs in an activity, never in the workflow.

The handler gets a ``FlowManager`` whose ``state`` is a copy of the call's state; the
copy comes back with the result and the workflow merges it, so a handler that fails
half-way changes nothing durable.

Handlers are trusted code, and the worker decides which: it imports a flow's ``handlers``
module only from its own flow directories (``RINGFLOW_FLOWS_DIR``), never from the path
the client that started the call happened to load the flow from, nor from ``sys.path``
(``handlers: os`` names no file there). And it runs only async functions that keep the
handler contract (``flow_manager`` first, documented arguments), checked before the call,
so a definition that never went through ``flow validate`` cannot call any other callable.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import logging
import os
from collections.abc import Callable, Sequence
from datetime import timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from temporalio import activity

from ringflow.activities.metrics import timed
from ringflow.callflow.handler_api import NO_RESPONSE, TRANSITION_IN_YAML, FlowManager
from ringflow.callflow.handlers import HandlerModuleError, get_handler, load_module
from ringflow.callflow.safe_text import scrub
from ringflow.callflow.schema import SignatureError, handler_schema
from ringflow.callflow.subflow_handlers import AT
from ringflow.contract.wire import encoded_bytes

log = logging.getLogger(__name__)
MAX_RESULT_BYTES = 256 * 1024


class HandlerInput(BaseModel):
    call_id: str
    node: str
    name: str
    module: str
    flow_source: str | None = None
    # a used flow's module (a subflow's function): never taken from a bare flow directory,
    # where the calling flow's module of the same name may be (``module_folder``)
    subflow: bool = False
    args: dict[str, Any] = {}
    variables: dict[str, Any] = {}
    state: dict[str, Any] = {}
    timeout_s: float = 10
    # ``flow_manager.idempotency_key``: the workflow derives it from what the run answers
    # (the agent's event, a job, the engine's run), so every retry of one run carries it
    idempotency_key: str = ""


class HandlerOutput(BaseModel):
    result: Any = None
    response: str = "transition_in_yaml"
    error: str | None = None
    # What the handler changed, so the workflow merges only that: two handlers running at
    # once must not overwrite each other's writes with their stale copies.
    changed: dict[str, Any] = {}
    removed: list[str] = []


def _response_name(marker: Any) -> str:
    if marker is TRANSITION_IN_YAML:
        return "transition_in_yaml"
    if marker is NO_RESPONSE:
        return "no_response"
    return repr(marker)[:80]


def parse_flow_dirs(value: str | Sequence[str | Path] | None) -> list[Path]:
    """``RINGFLOW_FLOWS_DIR``: directories separated by ``os.pathsep``; unset, the working
    directory (``make run``, ``ringflow dev`` and the tests run from the project's root)."""
    items: Sequence[str | Path] = value.split(os.pathsep) if isinstance(value, str) else (value or [])
    dirs = [Path(v).expanduser().resolve() for v in items if str(v).strip()]
    return dirs or [Path.cwd().resolve()]


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _source_folder(source: str | None, root: Path) -> Path | None:
    """The folder of the flow file ``source`` as seen from ``root`` (relative sources are
    relative to it)."""
    if not source:
        return None
    src = Path(source)
    return (src if src.is_absolute() else root / src).parent.resolve()


def _candidates(source: str | None, root: Path, bare_root: bool = True) -> list[Path]:
    """Where, under ``root``, a flow loaded from ``source`` (a path on the client's machine)
    may keep its handlers: the source's folder if it lies under ``root``, then the tails of
    that folder's path under ``root`` (``/home/dev/repo/flows/x`` → ``root/flows/x``,
    ``root/x``), then ``root`` (unless not ``bare_root``). Nothing outside ``root``."""
    found: list[Path] = []
    folder = _source_folder(source, root)
    if source and folder is not None:
        src = Path(source)
        if _inside(folder, root):
            found.append(folder)
        parts = [p for p in src.parent.parts if p not in (src.anchor, ".", "..")]
        for i in range(len(parts)):
            tail = root.joinpath(*parts[i:]).resolve()
            if _inside(tail, root) and tail not in found:
                found.append(tail)
    if root not in found and bare_root:
        found.append(root)
    return found


def module_folder(module: str, source: str | None, dirs: Sequence[Path], subflow: bool = False) -> Path:
    """The flow directory (or a folder under one) holding ``module``'s file.

    The flow's own folder wins over every other candidate in every directory: a worker
    serving several flow directories (``call simulate`` over scripts from several places)
    may hold two different modules of the same name, and a flow must get the one beside it,
    not the first same-named file a tail or a root of another directory happens to hold.
    A used flow's (``subflow``) is looked for in its own folder or one of its name, never
    in a bare flow directory: there the calling flow's module of the same name may be."""
    rel = Path(*module.split("."))
    searched = [(root, folder) for root in dirs for folder in _candidates(source, root, not subflow)]
    own = [(root, folder) for root, folder in searched if folder == _source_folder(source, root)]
    for root, folder in own + searched:
        for file in (folder / f"{rel}.py", folder / rel / "__init__.py"):
            if file.is_file() and _inside(file.resolve(), root):  # no symlink out of it
                return folder
    shown = os.pathsep.join(str(d) for d in dirs)
    raise HandlerModuleError(
        f"handlers module '{module}' is not in the worker's flow directories "
        f"({shown}); put it there beside its flow, or set RINGFLOW_FLOWS_DIR"
    )


@lru_cache(maxsize=1024)
def contract_problem(fn: Callable[..., Any]) -> str | None:
    """Why ``fn`` is not a handler (async, ``flow_manager`` first, documented), or None."""
    try:
        handler_schema(fn)
    except SignatureError as exc:
        return str(exc)
    except Exception as exc:  # e.g. a builtin without a signature
        return f"not a handler ({type(exc).__name__})"
    return None


async def call_handler(
    inp: HandlerInput, flow_dirs: Sequence[Path] | None = None, **manager: Any
) -> HandlerOutput:
    """Import, check, call, check the return shape; every failure becomes an error result.
    ``manager`` sets more of the ``FlowManager`` (a background job's progress)."""
    dirs = list(flow_dirs) if flow_dirs is not None else parse_flow_dirs(None)
    try:
        folder = module_folder(inp.module, inp.flow_source, dirs, inp.subflow)
        module = load_module(inp.module, folder, search_path=False)
    except HandlerModuleError as exc:
        return HandlerOutput(error=str(exc))
    fn = get_handler(module, inp.name)
    if fn is None:
        return HandlerOutput(error=f"handler '{inp.name}' not found in '{inp.module}'")
    problem = contract_problem(fn)
    if problem is not None:  # never called: a definition may name any callable
        log.warning("handler %s refused: %s", inp.name, problem)
        return HandlerOutput(error=f"handler '{inp.name}' in '{inp.module}' was refused: {problem}")
    fm = FlowManager(
        call_id=inp.call_id,
        node=inp.node,
        variables=dict(inp.variables),
        state=copy.deepcopy(inp.state),
        idempotency_key=inp.idempotency_key,
        **manager,
    )
    try:
        returned = await asyncio.wait_for(fn(fm, **inp.args), timeout=inp.timeout_s)
    except TimeoutError:
        return HandlerOutput(error=f"handler '{inp.name}' timed out after {inp.timeout_s:g} s")
    except Exception as exc:
        log.warning("handler %s raised %s", inp.name, type(exc).__name__)
        return HandlerOutput(error=f"{type(exc).__name__}: {exc}"[:500])
    if not (isinstance(returned, tuple) and len(returned) == 2):
        return HandlerOutput(
            error=f"handler '{inp.name}' must return (result, TRANSITION_IN_YAML) "
            f"or (result, NO_RESPONSE), not {type(returned).__name__}"
        )
    result, marker = returned
    try:
        json.dumps(result)
        json.dumps(fm.state)
        size = encoded_bytes(result)
    except (TypeError, ValueError) as exc:
        return HandlerOutput(error=f"handler '{inp.name}' returned a value that is not JSON: {exc}")
    if size > MAX_RESULT_BYTES:
        return HandlerOutput(
            error=f"handler '{inp.name}' returned {size} bytes; the limit is {MAX_RESULT_BYTES}"
        )
    changed = {k: v for k, v in fm.state.items() if k not in inp.state or inp.state[k] != v}
    removed = [k for k in inp.state if k not in fm.state]
    # A NUL or lone surrogate in what the handler kept or returned is replaced here: a lone
    # surrogate cannot even be encoded as this activity's result, and no store takes a NUL.
    return HandlerOutput(
        result=scrub(result), response=_response_name(marker), changed=scrub(changed), removed=removed
    )


class HandlerCheck(BaseModel):
    """A published version's handler modules (``FlowRef.handlers``: module, or a used flow's
    ``module@file``, -> sha256) and where its flow was loaded from, for the worker to
    compare with its own copies."""

    version: str
    flow_source: str | None = None
    handlers: dict[str, str] = {}


def module_home(key: str, flow_source: str | None) -> tuple[str, str | None]:
    """A version's handler hash key as (module, the flow file it is found beside): a used
    flow's ``module@file`` is beside that file, relative to the calling flow's folder."""
    module, at, rel = key.partition(AT)
    if not at:
        return module, flow_source
    base = os.path.dirname(flow_source) if flow_source else ""
    return module, os.path.normpath(os.path.join(base, rel))


def handlers_problem(check: HandlerCheck, dirs: Sequence[Path]) -> str | None:
    """Why this worker's handler code is not the code the version was published with, or
    None. An empty published hash (a module found on ``sys.path`` at publish) only needs
    the module to be in the worker's flow directories."""
    for key, want in sorted(check.handlers.items()):
        module, source = module_home(key, check.flow_source)
        try:
            folder = module_folder(module, source, dirs, subflow=AT in key)
        except HandlerModuleError as exc:
            return str(exc)
        rel = Path(*module.split("."))
        file = next(f for f in (folder / f"{rel}.py", folder / rel / "__init__.py") if f.is_file())
        have = hashlib.sha256(file.read_bytes()).hexdigest()
        if want and have != want:
            return (
                f"the worker's handlers module '{key}' ({file.name}, sha256 {have[:12]}) is not the "
                f"code flow version {check.version} was published with (sha256 {want[:12]}): "
                "deploy that code to the workers, or publish the flow again with this code"
            )
    return None


class HandlerRunner:
    """The ``run_handler`` activity, bound to the worker's flow directories."""

    def __init__(self, flow_dirs: str | Sequence[str | Path] | None = None) -> None:
        self.flow_dirs = parse_flow_dirs(flow_dirs)

    @activity.defn(name="check_handlers")
    async def check_handlers(self, check: HandlerCheck) -> str | None:
        """A call of a published version starts only on the handler code it was published
        with: the reason it may not, or None."""
        return await asyncio.to_thread(handlers_problem, check, self.flow_dirs)

    @activity.defn(name="run_handler")
    async def run_handler(self, inp: HandlerInput) -> HandlerOutput:
        with timed("function", "handler") as outcome:
            beat = heartbeats() if activity.info().heartbeat_timeout else None
            try:
                out = await call_handler(inp, self.flow_dirs)
            finally:
                if beat is not None:
                    beat.cancel()
            outcome["ok"] = out.error is None
        return out


def heartbeats() -> asyncio.Task[None]:
    """A run the workflow may cancel (``cancel_on_interruption``) heartbeats while the
    handler runs: a cancellation reaches an activity only in a heartbeat's answer, and then
    cancels the handler's coroutine here."""

    async def beat() -> None:
        interval = (activity.info().heartbeat_timeout or timedelta(seconds=2)).total_seconds() / 4
        while True:
            activity.heartbeat()
            await asyncio.sleep(interval)

    return asyncio.get_running_loop().create_task(beat())
