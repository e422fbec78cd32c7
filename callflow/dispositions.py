"""A call's disposition: the one rule that decides it, and which values may be shown.

The rule (:func:`disposition_of`): an extracted value named ``disposition`` (a
non-empty string; declare it in a node's ``extract``, usually with an ``enum``) wins,
the conversation knowing best how it went; otherwise the ``disposition`` of the end
node the call finished on; otherwise the end reason. The engine keeps
``CallState.disposition`` by it, and the workflow's record, state query and search
attributes read it from there, so none of them can disagree.

Which may be shown outside the call record (search attributes, metrics labels): a
disposition can be extracted by an LLM from what the caller said, so it may be anything,
a name, a phone or a card number included. Visibility and Prometheus are read by people and
systems that must not see those, and every distinct label value is a new time series. So
only values the flow declares go there, and anything else is ``other``; the call record
keeps the real value.

Declared: an end node's ``disposition``, the ``enum`` of an extracted field or variable named
``disposition``, and the end reasons (the fallback disposition).
"""

from __future__ import annotations

from typing import Any

from ringflow.callflow.model import Flow, Node
from ringflow.callflow.state import END_REASONS

OTHER = "other"
DISPOSITION_FIELD = "disposition"
DISPOSITION_FIELDS = frozenset({DISPOSITION_FIELD})


def disposition_of(extracted: dict[str, Any], node: Node | None, end_reason: str | None) -> str | None:
    """The rule, given the extracted values, the node the call ended on and why it ended."""
    value = extracted.get(DISPOSITION_FIELD)
    if isinstance(value, str) and value.strip():
        return value
    if node is not None and node.type == "end" and node.disposition:
        return node.disposition
    return end_reason


def declared_dispositions(flow: Flow) -> frozenset[str]:
    values: set[str] = set(END_REASONS)
    for node in flow.nodes.values():
        if node.type == "end" and node.disposition:
            values.add(node.disposition)
        for spec in node.extract:
            if spec.name in DISPOSITION_FIELDS and spec.enum:
                values.update(v for v in spec.enum if isinstance(v, str))
    for name, var in flow.variables.items():
        if name in DISPOSITION_FIELDS and var.enum:
            values.update(v for v in var.enum if isinstance(v, str))
    return frozenset(values)


def public_disposition(value: str | None, declared: frozenset[str]) -> str:
    """``value`` when the flow declares it, ``""`` for none, else :data:`OTHER`."""
    if not value:
        return ""
    return value if value in declared else OTHER
