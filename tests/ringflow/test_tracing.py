"""OpenTelemetry traces: off by default, and with the standard OTEL_* variables a call's
spans run from the agent's tool call through Temporal into the workflow and activities.

The collector is the one thing faked, at its network boundary: a small HTTP server that
takes OTLP/HTTP exports (protobuf) as a real collector would.
"""

from __future__ import annotations

import asyncio
import json
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


@pytest.mark.parametrize(
    ("env", "kind"),
    [
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"}, "grpc"),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            },
            "http",
        ),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, "http"),
        ({"OTEL_TRACES_EXPORTER": "console"}, "ConsoleSpanExporter"),
        ({"OTEL_TRACES_EXPORTER": "console,otlp_proto_grpc"}, "ConsoleSpanExporter,grpc"),
    ],
)
def test_the_exporters_are_the_sdks_reading_of_the_otel_variables(
    env: dict[str, str], kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK's entry points pick the exporter (several, comma-separated, as the spec
    allows), which reads its own endpoint: no exporter is chosen by hand."""
    from ringflow.tracing import exporters

    for key in [k for k in os.environ if k.startswith("OTEL_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    found = exporters()
    names = [
        "grpc"
        if ".grpc." in type(e).__module__
        else "http"
        if ".http." in type(e).__module__
        else type(e).__name__
        for e in found
    ]
    assert ",".join(names) == kind
    for e in found:
        e.shutdown()
    endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if endpoint and kind == "http":  # the exporter's own reading of the endpoint variable
        assert found[0]._endpoint == endpoint + "/v1/traces"


def test_clients_get_no_interceptor_without_configuration() -> None:
    if tracing_configured():
        pytest.skip("this environment configures OTEL_*")
    assert tracing_interceptors() == []


class Collector:
    def __init__(self) -> None:
        # name, trace id, parent span id, attributes, service name, span id
        self.spans: list[tuple[str, bytes, bytes, dict[str, str], str, bytes]] = []

    async def traces(self, request: web.Request) -> web.Response:
        req = ExportTraceServiceRequest.FromString(await request.read())
        for rs in req.resource_spans:
            service = next(
                (a.value.string_value for a in rs.resource.attributes if a.key == "service.name"), ""
            )
            for ss in rs.scope_spans:
                for s in ss.spans:
                    attrs = {a.key: a.value.string_value for a in s.attributes}
                    self.spans.append((s.name, s.trace_id, s.parent_span_id, attrs, service, s.span_id))
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
    # Attaching is in the call's trace, but not the parent of everything the call does afterwards.
    attach_traces = {s[1] for s in col.spans if s[0] == "ringflow.agent.attach"}
    assert attach_traces == tool_spans
    attach_ids = {s[5] for s in col.spans if s[0] == "ringflow.agent.attach"}
    assert not any(s[2] in attach_ids for s in col.spans if s[0] == "ringflow.agent.tool_call")


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


async def test_one_call_is_one_trace_from_agent_to_workflow_across_a_crash(temporal_server: DevStack) -> None:
    """One simulated call, its agent killed at the third turn and a new one attached, spans
    in the SDK's in-memory exporter: every span of the call (the agents' attaches, turns,
    tool calls and outbox signals, the workflow's tasks, signals, updates and activities)
    has one trace id and hangs under one root, the call's. Before, each agent tool call, each
    outbox signal and each attach was a root of its own."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.support.traced_call",
        temporal_server.address,
        str(SCRIPT),
        "3",
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    first, *lines = out.decode().splitlines()
    result = json.loads(first)
    assert result["ok"], out.decode()[:2000] + err.decode()[-3000:]
    spans = [json.loads(line) for line in lines]
    wf_id = f"call-{result['call_id']}"
    # The call's spans; not the simulator's own reads of its state (an observer's queries,
    # as `call show` sends them: traces of their own).
    mine = [
        s
        for s in spans
        if (
            s["attributes"].get("temporalWorkflowID") == wf_id
            or s["attributes"].get("ringflow.call_id") == result["call_id"]
        )
        and s["name"] not in ("QueryWorkflow:state", "HandleQuery:state")
    ]
    names = {s["name"] for s in mine}
    for expected in (
        "ringflow.call",
        "StartWorkflow:CallWorkflow",
        "RunWorkflow:CallWorkflow",
        "ringflow.agent.attach",
        "ringflow.agent.tool_call",
        "StartWorkflowUpdate:attach",
        "StartWorkflowUpdate:call_function",
        "HandleUpdate:call_function",
    ):
        assert expected in names, sorted(names)
    assert any(n.startswith("SignalWorkflow:") for n in names), sorted(names)  # the outbox's
    assert any(n.startswith("HandleSignal:") for n in names), sorted(names)
    assert any(n.startswith("RunActivity:") for n in names), sorted(names)
    attaches = [s for s in mine if s["name"] == "ringflow.agent.attach"]
    assert sorted(s["attributes"]["ringflow.resumed"] for s in attaches) == ["False", "True"]
    by_trace: dict[str, list[str]] = {}
    for s in mine:
        by_trace.setdefault(s["trace_id"], []).append(s["name"])
    assert len(by_trace) == 1, {t: sorted(set(n)) for t, n in by_trace.items()}
    [trace_id] = by_trace
    in_trace = [s for s in spans if s["trace_id"] == trace_id]
    roots = [s for s in in_trace if s["parent"] is None]
    assert [r["name"] for r in roots] == ["ringflow.call"], roots
    # livekit-agents' own spans of the call (its session, turns, LLM requests) are in it too
    assert any(s["scope"].startswith("livekit") for s in in_trace), sorted({s["scope"] for s in in_trace})


@pytest.mark.parametrize(
    ("env", "sampler"),
    [
        ({}, "ParentBased{root:AlwaysOnSampler"),
        ({"OTEL_TRACES_SAMPLER": "always_off"}, "AlwaysOffSampler"),
        (
            {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"},
            "ParentBased{root:TraceIdRatioBased{0.25}",
        ),
    ],
)
def test_the_sampler_and_resource_are_the_sdks_reading_of_the_otel_variables(
    env: dict[str, str], sampler: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whole calls are sampled or not (a call is one trace; its agents' spans follow the
    root's decision through the parent-based sampler)."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from ringflow.tracing import build_provider

    for key in [k for k in os.environ if k.startswith("OTEL_")]:
        monkeypatch.delenv(key)
    for key, value in {**env, "OTEL_RESOURCE_ATTRIBUTES": "service.name=calls-eu"}.items():
        monkeypatch.setenv(key, value)
    provider = build_provider(lambda: [InMemorySpanExporter()])
    assert provider.sampler.get_description().startswith(sampler)
    assert provider.resource.attributes["service.name"] == "calls-eu"
    provider.shutdown()


async def test_each_campaign_call_is_a_trace_of_its_own_linked_to_the_campaign(
    temporal_server: DevStack, sqlite_url: str, task_queue: str
) -> None:
    """Two calls of one campaign, spans in the SDK's in-memory exporter: each call is its own
    trace under one ``ringflow.call`` root (made by the campaign's drive, which starts it), holding
    the call's workflow spans and its agent's; the root links to the campaign's trace, and
    neither call's spans are in the campaign's trace. Before, both calls were branches of the
    campaign's trace."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.support.traced_campaign",
        temporal_server.address,
        temporal_server.namespace,
        sqlite_url,
        task_queue,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode == 0, out.decode()[-2000:] + err.decode()[-3000:]
    first, *lines = out.decode().splitlines()
    call_ids = json.loads(first)["call_ids"]
    assert len(call_ids) == 2
    spans = [json.loads(line) for line in lines]
    campaign_traces = {s["trace_id"] for s in spans if s["name"] == "RunWorkflow:CampaignWorkflow"}
    assert len(campaign_traces) == 1
    traces = []
    for call_id in call_ids:
        # the call's spans; not the stand-in agent's reads of its state (an observer's
        # queries, as `call show` sends them: traces of their own)
        mine = [
            s
            for s in spans
            if (
                s["attributes"].get("temporalWorkflowID") == f"call-{call_id}"
                or s["attributes"].get("ringflow.call_id") == call_id
            )
            and s["name"] not in ("QueryWorkflow:state", "HandleQuery:state")
        ]
        names = {s["name"] for s in mine}
        for expected in ("ringflow.call", "RunWorkflow:CallWorkflow", "ringflow.agent.hangup"):
            assert expected in names, (call_id, sorted(names))
        assert any(n.startswith("RunActivity:") for n in names), sorted(names)
        by_trace: dict[str, set[str]] = {}
        for s in mine:
            by_trace.setdefault(s["trace_id"], set()).add(s["name"])
        assert len(by_trace) == 1, by_trace
        [trace_id] = by_trace
        in_trace = [s for s in spans if s["trace_id"] == trace_id]
        roots = [s for s in in_trace if s["parent"] is None]
        assert [r["name"] for r in roots] == ["ringflow.call"], roots
        assert roots[0]["attributes"]["ringflow.call_id"] == call_id
        assert set(roots[0]["links"]) <= campaign_traces and roots[0]["links"]
        assert "StartWorkflow:CallWorkflow" in {s["name"] for s in in_trace}  # by the campaign's drive
        traces.append(trace_id)
    assert len(set(traces)) == 2 and not set(traces) & campaign_traces
