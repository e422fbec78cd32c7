"""A campaign child call's own trace, made deterministically inside the campaign workflow.

A call started directly gets a root span ``ringflow.call`` whose W3C context travels in
``CallInput.trace`` (``workflows/client.py``: ``call_root``). A campaign's child calls are
started by the campaign workflow, which may not draw random ids (a replay must issue the same
input), so their root's ids are derived from the campaign run's first id and the call id (a
call id is started once: ``<campaign>-<contact>-<attempt>``). The root span itself is made
with those ids through :class:`PresetIds`, the id generator of Ringflow's tracer providers
(``ringflow/tracing.py``: ``build_provider``), only when the workflow is not replaying, and
linked to the campaign's span. The child's start then runs with the root as the current
span, so Temporal's interceptor parents ``StartChildWorkflow`` (and through its header the
child's workflow spans) on it; agents read the same context from the input.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from temporalio import workflow

_preset: ContextVar[tuple[int, int] | None] = ContextVar("ringflow_preset_ids", default=None)


class PresetIds:
    """The SDK's id generator (duck-typed ``IdGenerator``), except while :func:`_preset_ids`
    names the next root's ids: then exactly those, so a span made inside a workflow has the
    ids the workflow derived (its random source would be the process's, not the workflow's)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def generate_span_id(self) -> int:
        preset = _preset.get()
        return preset[1] if preset is not None else int(self.inner.generate_span_id())

    def generate_trace_id(self) -> int:
        preset = _preset.get()
        return preset[0] if preset is not None else int(self.inner.generate_trace_id())

    def is_trace_id_random(self) -> bool:
        """Derived ids are a hash, as good as random for the W3C ``random`` flag."""
        return bool(self.inner.is_trace_id_random())


def derived_ids(run_id: str, call_id: str) -> tuple[int, int]:
    """A trace id (128 bits) and span id (64 bits) of the call's root: a hash of the
    campaign's first run id and the call id, so the same on every replay and unique per call."""
    digest = hashlib.sha256(f"ringflow.call/{run_id}/{call_id}".encode()).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:24], "big") or 1
    return trace_id, span_id


def child_root(call_id: str, flow: str) -> dict[str, str]:
    """The W3C carrier of the child's root, for its ``CallInput.trace``; ``{}`` when the
    campaign is not traced (no span current)."""
    here = trace.get_current_span().get_span_context()
    if not here.is_valid:
        return {}
    trace_id, span_id = derived_ids(workflow.info().first_execution_run_id, call_id)
    if not workflow.unsafe.is_replaying():
        token = _preset.set((trace_id, span_id))
        try:
            span = trace.get_tracer("ringflow").start_span(
                "ringflow.call",
                otel_context.Context(),
                kind=trace.SpanKind.PRODUCER,
                attributes={"ringflow.call_id": call_id, "ringflow.flow": flow},
                links=[trace.Link(here)],
                start_time=workflow.time_ns(),
            )
        finally:
            _preset.reset(token)
        span.end(end_time=workflow.time_ns())
    return {"traceparent": f"00-{trace_id:032x}-{span_id:016x}-{int(here.trace_flags):02x}"}


@contextmanager
def under(carrier: dict[str, str]) -> Iterator[None]:
    """Run with the carrier's span as the current one (nothing for ``{}``): the child's start
    then hangs under its own root, not the campaign's span."""
    if not carrier.get("traceparent"):
        yield
        return
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    token = otel_context.attach(TraceContextTextMapPropagator().extract(carrier, otel_context.Context()))
    try:
        yield
    finally:
        otel_context.detach(token)
