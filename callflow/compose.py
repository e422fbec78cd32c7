"""Composing what the LLM sees on a node: the system prompt and the tool list.

Kept apart from transition logic so the agent can rebuild a node's prompt and tools
after a crash from the state alone, exactly as the engine built them before.
"""

from __future__ import annotations

import datetime as dt
import math
from functools import lru_cache
from typing import Any

from ringflow.callflow.compiled import CompiledFlow, CompiledNode
from ringflow.callflow.digressions import offered
from ringflow.callflow.effects import SetNode, ToolSpec
from ringflow.callflow.journey import with_context
from ringflow.callflow.state import CallState


def _clock(at: float) -> tuple[str, str] | None:
    """``(HH:MM, YYYY-MM-DD)`` in UTC, or None for an instant outside the calendar.

    An absurd ``at`` must not crash the engine: it leaves the clock built-ins undefined
    (their fallbacks apply) instead of raising.
    """
    try:
        return _minute(math.floor(at / 60))
    except (ValueError, OverflowError):  # NaN, infinity
        return None


@lru_cache(maxsize=64)
def _minute(minute: int) -> tuple[str, str] | None:
    """Formatting a date costs more than the rest of a transition: once per minute, then cached."""
    try:
        t = dt.datetime.fromtimestamp(minute * 60, dt.UTC)
    except (ValueError, OverflowError, OSError):
        return None
    return t.strftime("%H:%M"), t.strftime("%Y-%m-%d")


def template_values(state: CallState) -> dict[str, Any]:
    """The call's values plus built-ins; time comes from the last event, not a clock."""
    values = state.values()
    clock = _clock(state.now) if state.now is not None else None
    if clock is not None:
        values.setdefault("current_time", clock[0])
        values.setdefault("current_date", clock[1])
    values.setdefault("caller_number", state.caller_number)
    values.setdefault("called_number", state.called_number)
    values.setdefault("call_id", state.call_id)
    return values


def prompt_for(flow: CompiledFlow, node: CompiledNode, values: dict[str, Any]) -> str:
    """The role (unless ``add_role: false``) then the task, rendered (see ``compiled``)."""
    return node.render_prompt(values)


def tools_for(node: CompiledNode, values: dict[str, Any]) -> list[ToolSpec]:
    """Node functions then globals; tools with a static description are built once, at compile
    time. The global nodes' tools (``node.dynamic``) are not among them: ``compose`` adds
    those the call's state offers."""
    if node.tools is not None:
        return list(node.tools)
    return [
        fn.tool
        or ToolSpec(
            name=name,
            description=fn.render_description(values),
            parameters=fn.llm_parameters,
            strict=fn.strict,
        )
        for name, fn in node.functions.items()
        if name not in node.dynamic and name not in node.hidden
    ]


_NO_VALUES: dict[str, Any] = {}


def compose(flow: CompiledFlow, state: CallState, node_id: str) -> SetNode:
    node = flow.nodes[node_id]
    values = _NO_VALUES if node.static else template_values(state)
    tools = tools_for(node, values)
    if node.dynamic:
        tools += [t for name in offered(flow, state, node_id) if (t := node.functions[name].tool) is not None]
    return SetNode(
        node=node_id,
        prompt=with_context(node.render_prompt(values), state.journey),
        tools=tools,
        context=node.node.context or flow.definition.flow.settings.context,
        allow_interrupt=node.node.allow_interrupt,
        greeting=node.render_greeting(values) if node.render_greeting is not None else None,
        listen=node.node.listen or flow.definition.flow.settings.listen,
    )
