"""The agent's and the worker's Prometheus endpoints export every series ops rely on.

A scripted call (agent killed in turn 3 and resumed) runs on the real dev server with a
worker whose runtime exports Prometheus metrics, and the real agent code in text mode.
The agent's endpoint is livekit-agents' own metrics server (what ``ringflow agent`` runs
with ``prometheus_port``) on this process's registry. Both are scraped over HTTP; the
series found here are also what the dashboard and alert rules may name
(``tests/infra/test_observability_infra.py``).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
import pytest_asyncio
from livekit.agents.telemetry.http_server import HttpServer

from ringflow.devstack import DevStack, free_port
from ringflow.settings import Settings
from ringflow.simulation.local_dispatch import LOCAL
from ringflow.simulation.phone import LINES
from ringflow.simulation.scripted_llm import ScriptedLLM
from ringflow.simulation.simulator import SimulationResult, run_script
from ringflow.temporal_setup import connect
from ringflow.workflows.worker import build_worker, prometheus_runtime
from tests.support.paths import ROOT
from tests.support.wfkit import wait_until

SCRIPT = ROOT / "examples" / "scripts" / "appointment_reminder_reschedule.yaml"
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", re.M)

AGENT_SERIES = (
    "ringflow_agent_calls_active",
    "ringflow_agent_transitions_total",
    "ringflow_agent_transition_seconds_bucket",
    "ringflow_agent_outbox_pending_events",
    "ringflow_agent_outbox_oldest_pending_seconds",
    "ringflow_agent_attach_seconds_bucket",
    "ringflow_agent_signals_failed_total",
)
WORKER_SERIES = (
    "ringflow_calls_started_total",
    "ringflow_calls_ended_total",
    "ringflow_transitions_total",
    "ringflow_signal_lag_seconds_bucket",
    "ringflow_function_runs_total",
    "ringflow_function_duration_seconds_bucket",
    # the SDK's (durations in seconds, names without the unit)
    "temporal_workflow_task_schedule_to_start_latency_bucket",
    "temporal_workflow_task_execution_latency_bucket",
    "temporal_activity_execution_latency_bucket",
)


@dataclass
class Scrapes:
    agent: str
    worker: str
    result: SimulationResult
    agent_before: str = ""  # the registry is the process's: other tests' calls count too

    def value(self, text: str, name: str, labels: str) -> float:
        return sum(v for lbl, v in self.samples(text, name) if lbl == labels)

    def delta(self, name: str, labels: str) -> float:
        return self.value(self.agent, name, labels) - self.value(self.agent_before, name, labels)

    def samples(self, text: str, name: str) -> list[tuple[str, float]]:
        return [(m.group(2) or "", float(m.group(3))) for m in SAMPLE.finditer(text) if m.group(1) == name]

    def names(self) -> set[str]:
        return {m.group(1) for m in SAMPLE.finditer(self.agent + "\n" + self.worker)}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def scrapes(
    temporal_server: DevStack,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Scrapes]:
    worker_port, agent_port = free_port(), free_port()
    client = await connect(temporal_server.address, runtime=prometheus_runtime(worker_port))
    agent_http = HttpServer("127.0.0.1", agent_port)
    await agent_http.start()
    llm = ScriptedLLM()
    base_url = await llm.start()  # the extraction activity runs in our worker
    db = tmp_path_factory.mktemp("metrics") / "calls.db"
    settings = Settings(
        database_url=f"sqlite:///{db}",
        http_allow_private=True,
        openai_base_url=base_url,
        openai_api_key="scripted",
    )
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            before = (await http.get(f"http://127.0.0.1:{agent_port}/metrics")).text
        async with build_worker(
            client, settings, task_queue="metrics-test", dispatcher=LOCAL, telephony=LINES
        ):
            result = await run_script(SCRIPT, client, "metrics-test", llm, kill_at=3, resume="attach")
        async with httpx.AsyncClient(timeout=10) as http:
            agent = (await http.get(f"http://127.0.0.1:{agent_port}/metrics")).text

            async def exported() -> str | None:  # the SDK exports on its own schedule
                text = (await http.get(f"http://127.0.0.1:{worker_port}/metrics")).text
                return text if "ringflow_calls_ended_total{" in text else None

            worker = await wait_until(exported, what="the call's series exported")
        yield Scrapes(agent, worker, result, before)
    finally:
        await llm.stop()
        await agent_http.aclose()


def test_the_agent_exports_its_series(scrapes: Scrapes) -> None:
    assert scrapes.result.ok and scrapes.result.kills == 1, scrapes.result.failures
    for name in AGENT_SERIES:
        assert scrapes.samples(scrapes.agent, name), f"{name} missing from the agent's metrics"
    flow = '{flow="appointment_reminder"}'
    assert scrapes.delta("ringflow_agent_transitions_total", flow) >= 3  # made by the LLM
    assert scrapes.delta("ringflow_agent_attach_seconds_count", '{resumed="false"}') == 1
    assert scrapes.delta("ringflow_agent_attach_seconds_count", '{resumed="true"}') == 1  # after the kill
    assert scrapes.delta("ringflow_agent_transition_seconds_count", flow) >= 1


def test_the_worker_exports_its_series(scrapes: Scrapes) -> None:
    for name in WORKER_SERIES:
        assert scrapes.samples(scrapes.worker, name), f"{name} missing from the worker's metrics"
    ended = scrapes.samples(scrapes.worker, "ringflow_calls_ended_total")
    assert any('end_reason="completed"' in labels for labels, _ in ended)


# Counters the Temporal SDK creates at their first increment, so absent from a healthy run.
SDK_ON_FAILURE = {"temporal_workflow_task_execution_failed_total", "temporal_long_request_failure_total"}
# Ringflow's workflow counters that, like the SDK's, exist only once incremented (a recording
# that failed): each is checked to be created by the workflow's meter, so a misspelt name in
# an alert still fails here.
RINGFLOW_ON_FAILURE = {"ringflow_recordings_failed_total"}
# Prometheus' own series for every target it scrapes.
PROMETHEUS_OWN = {"up"}


def _receiver_series() -> set[str]:
    """What the webhook receiver's /metrics serves (its process registry, agents/webhook_metrics.py)."""
    from prometheus_client import generate_latest

    import ringflow.agents.webhook_metrics  # noqa: F401  (registers the receiver's series)

    return {m.group(1) for m in SAMPLE.finditer(generate_latest().decode())}


def test_dashboard_and_alerts_name_only_series_ringflow_exports(scrapes: Scrapes) -> None:
    from tests.support.promql import alert_expressions, dashboard_expressions, series_in

    meter_source = (ROOT / "workflows" / "visibility.py").read_text()
    for name in RINGFLOW_ON_FAILURE:
        assert f'"{name.removesuffix("_total")}"' in meter_source, f"{name} is created by no workflow meter"
    exported = scrapes.names() | SDK_ON_FAILURE | RINGFLOW_ON_FAILURE | PROMETHEUS_OWN | _receiver_series()
    for where, expr in {**alert_expressions(), **dashboard_expressions()}.items():
        named = series_in(expr)
        assert named, f"{where}: no series in {expr!r}"
        unknown = named - exported
        assert not unknown, f"{where}: {sorted(unknown)} not exported by the agent or the worker"
