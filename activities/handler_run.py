"""Running a flow's handler: user code, so it runs in an activity, never in the workflow.

The handler gets a ``FlowManager`` whose ``state`` is a copy of the call's state; the
copy comes back with the result and the workflow merges it, so a handler that fails
half-way changes nothing durable.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from temporalio import activity

from activities.metrics import timed
from callflow.handler_api import NO_RESPONSE, TRANSITION_IN_YAML, FlowManager
from callflow.handlers import HandlerModuleError, get_handler, load_module

log = logging.getLogger(__name__)
MAX_RESULT_BYTES = 256 * 1024


class HandlerInput(BaseModel):
    call_id: str
    node: str
    name: str
    module: str
    flow_source: str | None = None
    args: dict[str, Any] = {}
    variables: dict[str, Any] = {}
    state: dict[str, Any] = {}
    timeout_s: float = 10


class HandlerOutput(BaseModel):
    result: Any = None
    response: str = "transition_in_yaml"
    error: str | None = None
    state: dict[str, Any] | None = None
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


async def call_handler(inp: HandlerInput) -> HandlerOutput:
    """Import, call, check the return shape; every failure becomes an error result."""
    base = Path(inp.flow_source).parent if inp.flow_source else None
    try:
        module = load_module(inp.module, base)
    except HandlerModuleError as exc:
        return HandlerOutput(error=str(exc))
    fn = get_handler(module, inp.name)
    if fn is None:
        return HandlerOutput(error=f"handler '{inp.name}' not found in '{inp.module}'")
    fm = FlowManager(call_id=inp.call_id, node=inp.node, variables=dict(inp.variables),
                     state=copy.deepcopy(inp.state))
    try:
        returned = await asyncio.wait_for(fn(fm, **inp.args), timeout=inp.timeout_s)
    except TimeoutError:
        return HandlerOutput(error=f"handler '{inp.name}' timed out after {inp.timeout_s:g} s")
    except Exception as exc:
        log.warning("handler %s raised %s", inp.name, type(exc).__name__)
        return HandlerOutput(error=f"{type(exc).__name__}: {exc}"[:500])
    if not (isinstance(returned, tuple) and len(returned) == 2):
        return HandlerOutput(error=f"handler '{inp.name}' must return (result, TRANSITION_IN_YAML) "
                                   f"or (result, NO_RESPONSE), not {type(returned).__name__}")
    result, marker = returned
    try:
        size = len(json.dumps(result))
        json.dumps(fm.state)
    except (TypeError, ValueError) as exc:
        return HandlerOutput(error=f"handler '{inp.name}' returned a value that is not JSON: {exc}")
    if size > MAX_RESULT_BYTES:
        return HandlerOutput(error=f"handler '{inp.name}' returned {size} bytes; the limit is "
                                   f"{MAX_RESULT_BYTES}")
    changed = {k: v for k, v in fm.state.items() if k not in inp.state or inp.state[k] != v}
    removed = [k for k in inp.state if k not in fm.state]
    return HandlerOutput(result=result, response=_response_name(marker), state=fm.state,
                         changed=changed, removed=removed)


@activity.defn(name="run_handler")
async def run_handler(inp: HandlerInput) -> HandlerOutput:
    with timed("function", "handler") as outcome:
        beat = _heartbeats() if activity.info().heartbeat_timeout else None
        try:
            out = await call_handler(inp)
        finally:
            if beat is not None:
                beat.cancel()
        outcome["ok"] = out.error is None
    return out


def _heartbeats() -> asyncio.Task[None]:
    """A run the workflow may cancel (``cancel_on_interruption``) heartbeats while the
    handler runs: a cancellation reaches an activity only in a heartbeat's answer, and then
    cancels the handler's coroutine here."""
    async def beat() -> None:
        interval = (activity.info().heartbeat_timeout or timedelta(seconds=2)).total_seconds() / 4
        while True:
            activity.heartbeat()
            await asyncio.sleep(interval)

    return asyncio.get_running_loop().create_task(beat())
