"""Which dispositions may be shown outside the call record: search attributes, metrics labels.

A disposition can be extracted by an LLM from what the caller said, so it may be anything,
a name, a phone or a card number included. Visibility and Prometheus are read by people and
systems that must not see those, and every distinct label value is a new time series. So
only values the flow declares go there, and anything else is ``other``; the call record
keeps the real value.

Declared: an end node's ``disposition``, the ``enum`` of an extracted field or variable named
``disposition`` or ``call_disposition``, and the end reasons (the fallback disposition).
"""

from __future__ import annotations

from callflow.model import Flow
from callflow.state import END_REASONS

OTHER = "other"
DISPOSITION_FIELDS = frozenset({"disposition", "call_disposition"})


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
