"""OpenTelemetry tracing, off unless the standard ``OTEL_*`` variables turn it on.

Turned on by ``OTEL_TRACES_EXPORTER`` (``otlp``, ``console``, any exporter registered as
an SDK entry point) or an OTLP endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``), and off again by ``OTEL_SDK_DISABLED=true`` or
``OTEL_TRACES_EXPORTER=none``. Everything else is the SDK's own reading of ``OTEL_*``: the
exporter by its entry point (``otlp`` over gRPC or HTTP by ``OTEL_EXPORTER_OTLP_PROTOCOL``),
its endpoint, headers and timeout, the sampler (``OTEL_TRACES_SAMPLER``), the resource
(``OTEL_SERVICE_NAME``/``OTEL_RESOURCE_ATTRIBUTES``; ``service.name`` defaults to ``ringflow``)
and the batch processor (``OTEL_BSP_*``).

When on, every client gets Temporal's ``TracingInterceptor``, which also traces the workers
built on it. A call is one trace (``workflows/client.py``: ``call_root``): its root span
is opened where the call is started and its context travels in the call's input
(``CallInput.trace``); the workflow's spans follow the start, every agent that attaches
parents its spans (attach, turns, tool calls, the outbox's signals) on the input's
context. Span attributes hold names and ids, never call data.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, cast

from opentelemetry import trace

_lock = threading.Lock()
_provider: Any = None


def tracing_configured(env: dict[str, str] | None = None) -> bool:
    env = dict(os.environ) if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


OTLP_BY_PROTOCOL = {"grpc": "otlp_proto_grpc", "http/protobuf": "otlp_proto_http"}


def exporters() -> list[Any]:
    """The span exporters ``OTEL_TRACES_EXPORTER`` names (``otlp`` when only an endpoint is
    set), resolved as the SDK's own auto-configuration resolves them: entry points of the
    ``opentelemetry_traces_exporter`` group, ``otlp`` mapped to gRPC or HTTP by
    ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``/``OTEL_EXPORTER_OTLP_PROTOCOL`` (gRPC by default).
    Read through the public entry-point API rather than the SDK's private helpers, which may
    change in any release. Each exporter then reads its own ``OTEL_EXPORTER_OTLP_*``
    (endpoint, headers, timeout, certificates). ``ValueError`` names an exporter no installed
    package provides."""
    from importlib.metadata import entry_points

    raw = os.environ.get("OTEL_TRACES_EXPORTER", "").strip() or "otlp"
    protocol = (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "grpc"
    ).strip()
    found = {ep.name: ep for ep in entry_points(group="opentelemetry_traces_exporter")}
    out: list[Any] = []
    for name in (n.strip() for n in raw.split(",")):
        if not name or name == "none":
            continue
        if name == "otlp":
            if protocol not in OTLP_BY_PROTOCOL:
                raise ValueError(
                    f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not one of {', '.join(OTLP_BY_PROTOCOL)}"
                )
            name = OTLP_BY_PROTOCOL[protocol]
        if name not in found:
            raise ValueError(
                f"OTEL_TRACES_EXPORTER names {name!r}, which no installed package provides "
                f"(installed: {', '.join(sorted(found)) or 'none'})"
            )
        out.append(found[name].load()())
    return out


class RedactingExporter:
    """Hands spans on without exception messages: Temporal's interceptor records them (status
    description, ``exception`` events), and a failed activity's message can quote the
    caller. The exception's type stays; its message and stack trace (which ends with the
    message) do not."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def export(self, spans: Any) -> Any:
        return self.inner.export([redact(s) for s in spans])

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))


def redact(span: Any) -> Any:
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.trace import Status

    status = span.status
    if status.description:
        status = Status(status.status_code, status.description.split(":", 1)[0])
    events = [
        Event(
            e.name,
            {
                k: v
                for k, v in (e.attributes or {}).items()
                if k not in ("exception.message", "exception.stacktrace")
            },
            e.timestamp,
        )
        if e.name == "exception"
        else e
        for e in span.events
    ]
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=span.attributes,
        events=events,
        links=span.links,
        kind=span.kind,
        status=status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


def default_resource_attributes(env: dict[str, str] | None = None) -> dict[str, str]:
    """What Ringflow adds to the SDK's resource: ``service.name=ringflow`` only when neither
    ``OTEL_SERVICE_NAME`` nor ``OTEL_RESOURCE_ATTRIBUTES`` names the service (attributes given
    to ``Resource.create`` win over both, so passing one always would override the operator's)."""
    env = dict(os.environ) if env is None else env
    if env.get("OTEL_SERVICE_NAME", "").strip():
        return {}
    given = (pair.split("=", 1)[0].strip() for pair in env.get("OTEL_RESOURCE_ATTRIBUTES", "").split(","))
    return {} if "service.name" in given else {"service.name": "ringflow"}


def setup_tracing() -> bool:
    """Install the global tracer provider once per process, if configured; True when tracing
    (also when ``install`` was called directly)."""
    if _provider is not None:
        return True
    if not tracing_configured():
        return False
    with _lock:
        if _provider is None:
            install(exporters)
    return True


def install(make_exporters: Callable[[], list[Any]], processor: Callable[[Any], Any] | None = None) -> None:
    """Install Ringflow's tracer providers (``setup_tracing``; a test passes an in-memory
    exporter and ``SimpleSpanProcessor``). The SDK reads the rest of its configuration from
    ``OTEL_*`` itself: the sampler (``OTEL_TRACES_SAMPLER``/``_ARG``), the resource
    (``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_SERVICE_NAME``), the batch processor's limits
    (``OTEL_BSP_*``) and the span limits (``OTEL_SPAN_*``)."""
    global _provider
    providers = [build_provider(make_exporters, processor) for _ in range(2)]
    trace.set_tracer_provider(providers[0])
    _provider = providers
    try:
        from livekit.agents.telemetry import set_tracer_provider

        # livekit-agents' own spans (LLM, TTS, tool execution) go to the same place, with
        # the conversation redacted. A provider of their own: livekit's redacting span
        # processor imports livekit, which must not happen inside a workflow's sandbox.
        set_tracer_provider(providers[1], allow_pii=False)
    except ImportError:
        pass


def build_provider(
    make_exporters: Callable[[], list[Any]], processor: Callable[[Any], Any] | None = None
) -> Any:
    """A tracer provider as the SDK configures one from ``OTEL_*`` (sampler, resource, span
    limits), each exporter behind the redaction and a batch processor (``OTEL_BSP_*``). Its
    ids are the SDK's random ones, except a campaign child call's root, whose ids the
    campaign workflow derives (``workflows/trace_ids.py``)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
    from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator

    from ringflow.workflows.trace_ids import PresetIds

    wrap = processor or BatchSpanProcessor
    provider = TracerProvider(
        resource=Resource.create(default_resource_attributes()),
        id_generator=cast(IdGenerator, PresetIds(RandomIdGenerator())),
    )  # shut down at exit
    for inner in make_exporters():
        # Duck-typed: it cannot subclass SpanExporter without importing the SDK
        # into every process that imports this module, traced or not.
        provider.add_span_processor(wrap(cast(SpanExporter, RedactingExporter(inner))))
    return provider


def tracing_on() -> bool:
    return _provider is not None


def tracing_interceptors() -> list[Any]:
    """``[TracingInterceptor()]`` for ``Client.connect`` when tracing is on, else nothing."""
    if not setup_tracing():
        return []
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return [TracingInterceptor()]


def flush(timeout_ms: int = 5000) -> None:
    for provider in _provider or ():
        provider.force_flush(timeout_ms)
