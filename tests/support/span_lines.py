"""The spans a traced subprocess kept in memory, printed one JSON line each for the test that
started it to read (``tests/support/traced_call.py``, ``tests/support/traced_campaign.py``):
ids in OpenTelemetry's hex form, so a test compares them as the Temporal UI and any exporter
show them."""

from __future__ import annotations

import json

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def print_spans(memory: InMemorySpanExporter) -> None:
    for span in memory.get_finished_spans():
        ctx = span.context
        line = {
            "name": span.name,
            "trace_id": format(ctx.trace_id, "032x"),
            "span_id": format(ctx.span_id, "016x"),
            "parent": format(span.parent.span_id, "016x") if span.parent else None,
            "links": [format(link.context.trace_id, "032x") for link in span.links],
            "scope": span.instrumentation_scope.name if span.instrumentation_scope else "",
            "attributes": {k: str(v) for k, v in (span.attributes or {}).items()},
        }
        print(json.dumps(line))
