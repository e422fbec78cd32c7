"""OpenTelemetry tracing, off unless the standard ``OTEL_*`` variables turn it on.

Turned on by ``OTEL_TRACES_EXPORTER`` (``otlp`` or ``console``) or an OTLP endpoint
(``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``; the protocol from
``OTEL_EXPORTER_OTLP_PROTOCOL``, ``grpc`` by default as the spec says), and off again by
``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``. The service name comes from
``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` (default ``ringflow``).

When on, every client gets Temporal's ``TracingInterceptor``, which also traces the workers
built on it: a trace runs from the agent's tool call (``agents`` opens spans on its hot
path) through the update or signal into the workflow and its activities. Span attributes
hold names and ids, never call data.
"""

from __future__ import annotations

import os
import threading
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


def _exporter() -> Any:
    kind = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower().split(",")[0]
    if kind == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    protocol = (
        (
            os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
            or "grpc"
        )
        .strip()
        .lower()
    )
    # Endpoint, headers, timeout: from the OTEL_EXPORTER_OTLP_* variables.
    if protocol.startswith("http"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

        return HttpExporter()
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

    return GrpcExporter()


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
    """Install the global tracer provider once per process, if configured; True when tracing."""
    global _provider
    if not tracing_configured():
        return False
    with _lock:
        if _provider is None:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

            resource = Resource.create(default_resource_attributes())
            providers = []
            for _ in range(2):
                provider = TracerProvider(resource=resource)  # flushed and shut down at exit
                # Duck-typed: it cannot subclass SpanExporter without importing the SDK
                # into every process that imports this module, traced or not.
                exporter = cast(SpanExporter, RedactingExporter(_exporter()))
                provider.add_span_processor(BatchSpanProcessor(exporter))
                providers.append(provider)
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
    return True


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
