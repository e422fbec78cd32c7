"""OpenTelemetry traces: off by default, and with the standard OTEL_* variables a call's
spans run from the agent's tool call through Temporal into the workflow and activities.

The collector is the one thing faked, at its network boundary: a small HTTP server that
takes OTLP/HTTP exports (protobuf) as a real collector would.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ringflow.devstack import DevStack, free_port
from ringflow.tracing import default_resource_attributes, tracing_configured, tracing_interceptors
from tests.support.paths import ROOT

SCRIPT = ROOT / "examples" / "scripts" / "appointment_reminder_reschedule.yaml"


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "x"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, False),
    ],
)
def test_tracing_is_off_unless_otel_variables_configure_it(env: dict[str, str], on: bool) -> None:
    assert tracing_configured(env) is on


def test_clients_get_no_interceptor_without_configuration() -> None:
    if tracing_configured():
        pytest.skip("this environment configures OTEL_*")
    assert tracing_interceptors() == []


class Collector:
    def __init__(self) -> None:
        # name, trace id, parent span id, attributes, service name
        self.spans: list[tuple[str, bytes, bytes, dict[str, str], str]] = []

    async def traces(self, request: web.Request) -> web.Response:
        req = ExportTraceServiceRequest.FromString(await request.read())
        for rs in req.resource_spans:
            service = next(
                (a.value.string_value for a in rs.resource.attributes if a.key == "service.name"), ""
            )
            for ss in rs.scope_spans:
                for s in ss.spans:
                    attrs = {a.key: a.value.string_value for a in s.attributes}
                    self.spans.append((s.name, s.trace_id, s.parent_span_id, attrs, service))
        return web.Response(body=b"", content_type="application/x-protobuf")


@pytest_asyncio.fixture
async def collector() -> AsyncIterator[tuple[Collector, int]]:
    col = Collector()
    app = web.Application()
    app.router.add_post("/v1/traces", col.traces)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield col, port
    finally:
        await runner.cleanup()


async def test_a_simulated_call_is_traced_from_agent_to_activities(
    temporal_server: DevStack, collector: tuple[Collector, int]
) -> None:
    col, port = collector
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_SERVICE_NAME": "ringflow-sim",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "PYTHONPATH": str(ROOT),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "ringflow.cli",
        "call",
        "simulate",
        "--address",
        temporal_server.address,
        str(SCRIPT),
        env=env,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert out.decode().startswith("ok "), out.decode() + err.decode()[-2000:]
    names = {s[0] for s in col.spans}
    for expected in ("StartWorkflow:CallWorkflow", "RunWorkflow:CallWorkflow", "ringflow.agent.tool_call"):
        assert expected in names, sorted(names)
    assert any(n.startswith("RunActivity:") for n in names), sorted(names)
    assert {s[4] for s in col.spans} == {"ringflow-sim"}
    # One trace from the agent's tool call down into the workflow: the update it sent
    # (a handler function) is a child of the tool call's span.
    tool_spans = {s[1] for s in col.spans if s[0] == "ringflow.agent.tool_call"}
    below = [s for s in col.spans if s[1] in tool_spans and s[0] != "ringflow.agent.tool_call"]
    assert any("Update" in s[0] or "Signal" in s[0] for s in below), sorted({s[0] for s in below})
    assert all(
        s[3].get("ringflow.call_id", "").startswith("sim-")
        for s in col.spans
        if s[0] == "ringflow.agent.tool_call"
    )
    # Attaching is a span of its own, not the parent of everything the call does afterwards.
    attach_traces = {s[1] for s in col.spans if s[0] == "ringflow.agent.attach"}
    assert attach_traces and not attach_traces & tool_spans


def test_exported_spans_carry_exception_types_not_their_messages() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from ringflow.tracing import RedactingExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider()  # not installed globally: only this test's spans
    provider.add_span_processor(SimpleSpanProcessor(RedactingExporter(memory)))
    with pytest.raises(ValueError), provider.get_tracer("t").start_as_current_span("RunActivity:run_handler"):
        raise ValueError("the caller said their PIN is 4711")
    [span] = memory.get_finished_spans()
    assert span.status.description == "ValueError"
    [event] = span.events
    assert event.name == "exception" and event.attributes["exception.type"] == "ValueError"
    assert "4711" not in repr(span.to_json())


@pytest.mark.parametrize(
    ("env", "service"),
    [
        ({}, "ringflow"),
        ({"OTEL_SERVICE_NAME": "ringflow-agent"}, "ringflow-agent"),
        ({"OTEL_RESOURCE_ATTRIBUTES": "service.name=calls-eu,deployment.environment=prod"}, "calls-eu"),
        ({"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod"}, "ringflow"),
    ],
)
def test_the_service_name_comes_from_the_otel_variables(
    env: dict[str, str], service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``OTEL_RESOURCE_ATTRIBUTES``' service.name used to be overridden by the default."""
    from opentelemetry.sdk.resources import Resource

    for key in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    resource = Resource.create(default_resource_attributes())
    assert resource.attributes["service.name"] == service
    if "deployment.environment" in env.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        assert resource.attributes["deployment.environment"] == "prod"
