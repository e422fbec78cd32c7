"""Reaching Temporal as production runs it: TLS, mTLS and profiles through temporalio.envconfig.

The dev server cannot serve TLS, so a TLS-terminating proxy on loopback stands in front of
it (``tests/support/tls_proxy.py``) with a CA made for the test. The worker, the CLI and the setup
command run as real processes configured only by Temporal's own variables or a profile
file, exactly as in a pod.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest

from ringflow.devstack import DevStack, free_port
from ringflow.settings import Settings
from ringflow.temporal_env import TemporalConfigError, connect_options, describe
from ringflow.temporal_setup import connect, list_custom_search_attributes
from tests.support.tls_proxy import Pki, TlsProxy, make_pki
from tests.support.wfkit import Agent, req, start, wait_state, wait_until
from tests.support.worker_process import NO_AGENT

TEMPORAL_VARS = [k for k in os.environ if k.startswith(("TEMPORAL_", "RINGFLOW_TEMPORAL_"))]


@pytest.fixture(autouse=True)
def clean_temporal_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in TEMPORAL_VARS:
        monkeypatch.delenv(key, raising=False)


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


@pytest_asyncio.fixture
async def tls(temporal_server: DevStack, pki: Pki) -> AsyncIterator[TlsProxy]:
    async with TlsProxy(temporal_server.address, pki) as proxy:
        yield proxy


@pytest_asyncio.fixture
async def mtls(temporal_server: DevStack, pki: Pki) -> AsyncIterator[TlsProxy]:
    async with TlsProxy(temporal_server.address, pki, require_client_cert=True) as proxy:
        yield proxy


async def _run(*args: str, env: dict[str, str]) -> tuple[int, str]:
    """The ``ringflow`` CLI as a process, without blocking this loop (the proxy runs on it)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "ringflow.cli",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode()


def _env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "RINGFLOW_TEMPORAL_"))}
    return {**base, "PYTHONPATH": os.getcwd(), **extra}


async def test_tls_with_a_private_ca_from_temporal_variables(
    tls: TlsProxy, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", tls.address)
    monkeypatch.setenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH", str(pki.ca))
    settings = Settings()
    assert settings.temporal_address == tls.address  # the profile's address, RINGFLOW_* unset
    client = await connect(settings.temporal_address, settings.temporal_namespace)
    ns = await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace="default"))
    assert ns.namespace_info.name == "default"
    assert tls.handshakes_ok >= 1
    assert describe(connect_options()) == f"{tls.address} (namespace default, TLS)"

    # The server's certificate is really checked: a CA that did not sign it is refused.
    monkeypatch.setenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH", str(pki.other_ca))
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(connect(), 20)


async def test_mtls_profile_file_serves_worker_cli_and_setup(
    mtls: TlsProxy,
    pki: Pki,
    tmp_path: Path,
    task_queue: str,
    sqlite_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    profile = tmp_path / "temporal.toml"
    profile.write_text(f"""
[profile.prod]
address = "{mtls.address}"
namespace = "default"
[profile.prod.tls]
server_ca_cert_path = "{pki.ca}"
client_cert_path = "{pki.client_cert}"
client_key_path = "{pki.client_key}"
""")
    temporal = {"TEMPORAL_CONFIG_FILE": str(profile), "TEMPORAL_PROFILE": "prod"}
    for key, value in temporal.items():
        monkeypatch.setenv(key, value)

    # Setup Job: `ringflow temporal setup` with nothing but the profile.
    code, out = await _run("temporal", "setup", env=_env(**temporal))
    assert code == 0, out
    assert f"at {mtls.address}" in out

    # Without the client certificate the server side refuses the connection.
    no_cert = tmp_path / "no-cert.toml"
    no_cert.write_text(
        f'[profile.prod]\naddress = "{mtls.address}"\n[profile.prod.tls]\nserver_ca_cert_path = "{pki.ca}"\n'
    )
    code, out = await _run(
        "temporal", "setup", env=_env(TEMPORAL_CONFIG_FILE=str(no_cert), TEMPORAL_PROFILE="prod")
    )
    assert code == 1 and f"error: cannot reach Temporal at {mtls.address}" in out and "Traceback" not in out

    # A worker process and this test's client, both over mTLS; a call runs to its end.
    worker_env = _env(
        **temporal,
        RINGFLOW_TASK_QUEUE=task_queue,
        RINGFLOW_DATABASE_URL=sqlite_url,
        RINGFLOW_METRICS_PORT=str(free_port()),
    )
    worker = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "ringflow.cli",
        "worker",
        env=worker_env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        client = await connect()
        assert "RingflowStatus" in await list_custom_search_attributes(client, "default")
        call = await start(client, task_queue, agent_timeout_s=NO_AGENT)
        agent = Agent(call)
        await agent.say(("user", "yes, speaking"))
        await agent.transition("verify", "confirmed")
        await wait_state(call, lambda s: s.node == "offer", timeout=60, what="worker over mTLS")
        booked = await call.call_function(req("offer", "book", slot="Mon 9"))
        assert booked.result == {"status": "booked", "slot": "Mon 9"}
        record = await wait_until(lambda: call.handle.result(), timeout=60, what="call result")
        assert record.disposition == "booked"
        assert [t["text"] for t in record.transcript] == ["yes, speaking"]
        assert "ringflow-worker" in mtls.peer_names  # the client certificate was presented

        # The CLI reads the same profile.
        code, out = await _run("call", "show", call.call_id, "--json", env=_env(**temporal))
        assert code == 0 and '"booked"' in out, out
    finally:
        worker.terminate()
        _, err = await asyncio.wait_for(worker.communicate(), 30)
    assert f"worker on {mtls.address} (namespace default, mTLS)" in err.decode()


def test_ringflow_settings_win_over_the_temporal_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", "temporal.example:7233")
    monkeypatch.setenv("TEMPORAL_NAMESPACE", "calls-prod")
    monkeypatch.setenv("TEMPORAL_API_KEY", "k-not-secret")
    assert (Settings().temporal_address, Settings().temporal_namespace) == (
        "temporal.example:7233",
        "calls-prod",
    )
    monkeypatch.setenv("RINGFLOW_TEMPORAL_ADDRESS", "other:7233")
    monkeypatch.setenv("RINGFLOW_TEMPORAL_NAMESPACE", "ringflow")
    s = Settings()
    options = connect_options(s.temporal_address, s.temporal_namespace)
    assert options["target_host"] == "other:7233" and options["namespace"] == "ringflow"
    assert options["api_key"] == "k-not-secret" and options["tls"] is True  # API key implies TLS
    assert describe(options) == "other:7233 (namespace ringflow, TLS + API key)"
    assert "k-not-secret" not in describe(options)
    # The embedded dev stack ignores the profile.
    assert connect_options("127.0.0.1:1", envconfig=False) == {
        "target_host": "127.0.0.1:1",
        "namespace": "default",
    }


def test_a_broken_temporal_config_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(tmp_path / "missing.toml"))
    with pytest.raises(TemporalConfigError, match=r"missing\.toml: no such file"):
        connect_options()
    bad = tmp_path / "bad.toml"
    bad.write_text("[profile.default\naddress = 1\n")
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(bad))
    with pytest.raises(TemporalConfigError, match=r"bad\.toml"):
        connect_options()
    for command in (("config",), ("worker",), ("call", "list")):  # one line, exit 2, no traceback
        proc = subprocess.run(
            [sys.executable, "-m", "ringflow.cli", *command],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "TEMPORAL_CONFIG_FILE": str(bad)},
        )
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith(f"error: TEMPORAL_CONFIG_FILE={bad}"), proc.stderr
        assert "Traceback" not in proc.stderr
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(tmp_path / "ok.toml"))
    (tmp_path / "ok.toml").write_text('[profile.default.tls]\nserver_ca_cert_path = "/nonexistent/ca.pem"\n')
    with pytest.raises(TemporalConfigError, match="TLS"):
        connect_options()


async def test_setup_sets_retention_where_the_server_allows_it(temporal_server: DevStack) -> None:
    code, out = await _run(
        "temporal", "setup", "--address", temporal_server.address, "--retention-days", "3", env=_env()
    )
    assert code == 0, out
    assert "retention of namespace 'default' set to 3 days" in out
    client = await connect(temporal_server.address, envconfig=False)
    ns = await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace="default"))
    assert ns.config.workflow_execution_retention_ttl.seconds == 3 * 86400


def test_config_shows_how_temporal_is_reached_without_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from typer.testing import CliRunner

    from ringflow.cli import app

    monkeypatch.setenv("TEMPORAL_ADDRESS", "ns.acct.tmprl.cloud:7233")
    monkeypatch.setenv("TEMPORAL_NAMESPACE", "ns.acct")
    monkeypatch.setenv("TEMPORAL_API_KEY", "k-not-secret-but-hidden")
    result = CliRunner().invoke(app, ["config", "--json"])
    assert result.exit_code == 0, result.output
    values = json.loads(result.output)
    assert values["temporal_connection"] == "ns.acct.tmprl.cloud:7233 (namespace ns.acct, TLS + API key)"
    assert values["temporal_address"] == "ns.acct.tmprl.cloud:7233"
    assert "k-not-secret-but-hidden" not in result.output
