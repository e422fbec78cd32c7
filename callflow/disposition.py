"""A call's disposition (its outcome for reports): one rule, for the engine and the record.

An extracted value named ``disposition`` (a non-empty string; declare it in an end
node's or any node's ``extract``, usually with an ``enum``) wins: the conversation knows
best how it went. Otherwise the ``disposition`` of the end node the call finished on;
otherwise the end reason (``user_hangup``, ``max_duration``, ...). The engine keeps
``CallState.disposition`` by this rule, and the workflow's record, state query and
search attributes read it from there, so none of them can disagree.
"""

from __future__ import annotations

from typing import Any

from callflow.model import Node

DISPOSITION_FIELD = "disposition"


def disposition_of(extracted: dict[str, Any], node: Node | None, end_reason: str | None) -> str | None:
    """The rule above, given the extracted values, the node the call ended on and why it ended."""
    value = extracted.get(DISPOSITION_FIELD)
    if isinstance(value, str) and value.strip():
        return value
    if node is not None and node.type == "end" and node.disposition:
        return node.disposition
    return end_reason
