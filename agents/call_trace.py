"""The trace an agent's spans belong to: its call's, read from the call's input.

A call is one trace (``workflows/client.py``: ``call_root``): the start puts its root span's
W3C context in ``CallInput.trace``, and the workflow's spans follow the start's headers.
An agent learns the context before it sends anything, so its attach update, its turns and
tool calls and every signal its outbox sends land in that trace, and an agent that takes
over after a crash lands in the same one. It reads the call's first history event (the
run's start: its input and headers), which costs one round trip per attach and only with
tracing on. A call started without a context in its input (a campaign's child call, a call
started before this release) still has the start's headers when its starter traced: the
agent then joins the trace the workflow's spans are in.
"""

from __future__ import annotations

import logging
from typing import Any

from temporalio.client import Client
from temporalio.converter import PayloadConverter

from ringflow.workflows.client import tracing_on, workflow_id

log = logging.getLogger(__name__)
HEADER = "_tracer-data"  # temporalio.contrib.opentelemetry's header key


def context_of(carrier: Any) -> Any:
    """The OpenTelemetry context a W3C carrier names, or None (none, or no valid ``traceparent``)."""
    if not isinstance(carrier, dict) or not carrier.get("traceparent"):
        return None
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    ctx = TraceContextTextMapPropagator().extract({str(k): str(v) for k, v in carrier.items()})
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


async def call_context(client: Client, call_id: str) -> Any:
    """The call's trace context (an OpenTelemetry ``Context``), or None: tracing off, or a
    call whose start carried none. Never raises: an agent traces less rather than not serving."""
    if not tracing_on():
        return None
    try:
        handle = client.get_workflow_handle(workflow_id(call_id))
        async for event in handle.fetch_history_events(page_size=1):
            started = event.workflow_execution_started_event_attributes
            if started.input.payloads:
                try:
                    [inp] = await client.data_converter.decode(started.input.payloads[:1], [dict])
                    if (ctx := context_of(inp.get("trace") if isinstance(inp, dict) else None)) is not None:
                        return ctx
                except Exception as exc:  # an input this agent cannot read: the headers still can be
                    log.debug("call input unreadable for its trace (%s)", type(exc).__name__)
            header = started.header.fields.get(HEADER)
            if header is not None:
                return context_of(PayloadConverter.default.from_payloads([header])[0])
            return None
    except Exception as exc:
        log.warning(
            "call %s: trace context not read (%s); this agent's spans start a trace of their own",
            call_id,
            type(exc).__name__,
            extra={"event": "call_trace_unread"},
        )
    return None
