"""Composing what the LLM sees on a node: the system prompt and the tool list.

Kept apart from transition logic so the agent can rebuild a node's prompt and tools
after a crash from the state alone, exactly as the engine built them before.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from callflow.compiled import CompiledFlow, CompiledNode
from callflow.effects import SetNode, ToolSpec
from callflow.state import CallState


def template_values(state: CallState) -> dict[str, Any]:
    """The call's values plus built-ins; time comes from the last event, not a clock."""
    values = state.values()
    if state.now is not None:
        now = dt.datetime.fromtimestamp(state.now, dt.UTC)
        values.setdefault("current_time", now.strftime("%H:%M"))
        values.setdefault("current_date", now.strftime("%Y-%m-%d"))
    values.setdefault("caller_number", state.caller_number)
    values.setdefault("called_number", state.called_number)
    values.setdefault("call_id", state.call_id)
    return values


def prompt_for(flow: CompiledFlow, node: CompiledNode, values: dict[str, Any]) -> str:
    parts = []
    if node.node.add_role and flow.role is not None:
        parts.append(flow.role.render(values).strip())
    if node.task is not None:
        parts.append(node.task.render(values).strip())
    return "\n\n".join(p for p in parts if p)


def tools_for(node: CompiledNode, values: dict[str, Any]) -> list[ToolSpec]:
    return [
        ToolSpec(name=name, description=fn.description.render(values),
                 parameters=fn.llm_parameters, strict=fn.strict)
        for name, fn in node.functions.items()
    ]


def compose(flow: CompiledFlow, state: CallState, node_id: str) -> SetNode:
    node = flow.nodes[node_id]
    values = template_values(state)
    greeting = node.greeting.render(values) if node.greeting is not None else None
    return SetNode(
        node=node_id,
        prompt=prompt_for(flow, node, values),
        tools=tools_for(node, values),
        context=node.node.context or flow.definition.flow.settings.context,
        allow_interrupt=node.node.allow_interrupt,
        greeting=greeting,
    )
