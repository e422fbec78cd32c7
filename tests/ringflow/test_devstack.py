"""The dev stack: a real Temporal server on SQLite, its search attributes, restarts."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import socket
import sys
import uuid
from pathlib import Path

import httpx
import pytest
from google.protobuf import json_format
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from typer.testing import CliRunner

from ringflow.activities.search_attributes import (
    ALL_SEARCH_ATTRIBUTES,
    RINGFLOW_FLOW,
    RINGFLOW_STATUS,
    RINGFLOW_TRANSITIONS,
)
from ringflow.codec import EncryptionCodec, keyring_from_settings
from ringflow.devstack import DevStack, DevStackError, find_temporal_binary, free_port
from ringflow.settings import Settings
from ringflow.temporal_setup import (
    SearchAttributeConflict,
    connect,
    list_custom_search_attributes,
    register_search_attributes,
)
from tests.support.paths import ROOT

EXPECTED_TYPES = {
    "RingflowStatus": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "RingflowNode": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "RingflowFlow": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "RingflowDisposition": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "RingflowEndReason": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "RingflowCampaign": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "RingflowDirection": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "RingflowTransitions": IndexedValueType.INDEXED_VALUE_TYPE_INT,
    "RingflowSuccess": IndexedValueType.INDEXED_VALUE_TYPE_BOOL,
    "RingflowJourney": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
}


@workflow.defn(name="NeverRunWorkflow", sandboxed=False)
class NeverRunWorkflow:
    """Started without a worker: it only has to exist in the server's database."""

    @workflow.run
    async def run(self) -> None:  # pragma: no cover - no worker polls its queue
        await workflow.wait_condition(lambda: False)


def test_binary_and_command_line(temporal_server: DevStack) -> None:
    assert find_temporal_binary().is_file()
    cmd = temporal_server.command()
    assert cmd[1:3] == ["server", "start-dev"]
    assert cmd[cmd.index("--db-filename") + 1] == str(temporal_server.data_dir / "temporal.db")
    pragmas = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--sqlite-pragma"]
    assert pragmas == ["journal_mode=wal", "synchronous=normal"]
    assert "history.transferProcessorMaxPollRPS=1000" in cmd
    assert 'history.transferProcessorUpdateAckInterval="1s"' in cmd
    assert temporal_server.address == f"127.0.0.1:{temporal_server.port}"
    assert temporal_server.ui_address == f"http://127.0.0.1:{temporal_server.ui_port}"
    assert temporal_server.db_path.is_file()


async def test_search_attributes_registered(temporal_client: Client) -> None:
    attrs = await list_custom_search_attributes(temporal_client, "default")
    assert {k: attrs.get(k) for k in EXPECTED_TYPES} == EXPECTED_TYPES
    assert {k.name for k in ALL_SEARCH_ATTRIBUTES} == set(EXPECTED_TYPES)
    await register_search_attributes(temporal_client, "default")  # idempotent


async def test_type_conflict_is_reported(temporal_client: Client) -> None:
    with pytest.raises(SearchAttributeConflict, match="RingflowStatus"):
        await register_search_attributes(
            temporal_client, "default", [SearchAttributeKey.for_int("RingflowStatus")]
        )


def test_temporal_setup_command(temporal_server: DevStack) -> None:
    import typer

    from ringflow.cli.ops import temporal_app

    app = typer.Typer()
    app.add_typer(temporal_app, name="temporal")
    result = CliRunner().invoke(
        app, ["temporal", "setup", "--address", temporal_server.address, "--namespace", "default"]
    )
    assert result.exit_code == 0, result.output
    assert "registered" in result.output


async def test_restart_on_same_sqlite_file_keeps_workflows(
    temporal_server: DevStack, temporal_client: Client, task_queue: str
) -> None:
    wf_id = f"restart-{uuid.uuid4().hex[:8]}"
    attrs = TypedSearchAttributes(
        [
            SearchAttributePair(RINGFLOW_STATUS, "running"),
            SearchAttributePair(RINGFLOW_FLOW, "demo"),
            SearchAttributePair(RINGFLOW_TRANSITIONS, 0),
        ]
    )
    await temporal_client.start_workflow(
        NeverRunWorkflow.run, id=wf_id, task_queue=task_queue, search_attributes=attrs
    )
    temporal_server.stop()
    assert not temporal_server.running
    try:
        await temporal_server.start()
    finally:
        if not temporal_server.running:  # leave a server for the tests after this one
            await temporal_server.start()
    client = await connect(temporal_server.address)
    handle = client.get_workflow_handle(wf_id)
    desc = await handle.describe()
    assert desc.status == WorkflowExecutionStatus.RUNNING
    assert desc.typed_search_attributes.get(RINGFLOW_FLOW) == "demo"
    await handle.terminate("test done")


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


async def test_dev_command_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    port, ui_port, metrics_port, codec_port = free_port(), free_port(), free_port(), free_port()
    api_port = free_port()
    code = "import typer; from ringflow.cli.ops import dev; typer.run(dev)"
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "RINGFLOW_METRICS_PORT": str(metrics_port),
        "RINGFLOW_CODEC_SERVER_PORT": str(codec_port),
        "RINGFLOW_API_PORT": str(api_port),
    }
    env.pop("RINGFLOW_CODEC_KEYS", None)  # no configured key: `ringflow dev` makes a local one
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code,
        "--port", str(port), "--ui-port", str(ui_port), "--data-dir", str(tmp_path / "dev"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
        cwd=ROOT,
    )  # fmt: skip
    assert proc.stdout is not None
    output = b""
    try:
        async with asyncio.timeout(60):
            while b"Ctrl-C to stop" not in output:
                line = await proc.stdout.readline()
                assert line, f"ringflow dev exited before serving:\n{output.decode()}"
                output += line
        assert f"127.0.0.1:{port}".encode() in output
        client = await connect(f"127.0.0.1:{port}")
        attrs = await list_custom_search_attributes(client, "default")
        assert "RingflowStatus" in attrs
        key_file = tmp_path / "dev" / "codec.keys"
        assert key_file.stat().st_mode & 0o077 == 0, "the local key is readable by its owner only"
        local = keyring_from_settings(Settings(codec_keys=None, data_dir=tmp_path / "dev"))
        assert local is not None  # what the CLI beside the stack finds
        assert f"Codec     http://127.0.0.1:{codec_port}".encode() in output
        sealed = EncryptionCodec(local).encrypt(Payload(metadata={"encoding": b"json/plain"}, data=b'"hi"'))
        async with httpx.AsyncClient() as http:
            health = await http.get(f"http://127.0.0.1:{codec_port}/healthz")
            decoded = await http.post(
                f"http://127.0.0.1:{codec_port}/decode",
                json={"payloads": [json.loads(json_format.MessageToJson(sealed))]},
            )
        assert health.json() == {"ok": True}  # no key ids without the token
        assert base64.b64decode(decoded.json()["payloads"][0]["data"]) == b'"hi"'  # the UI's key is the CLI's
        assert f"Console   http://127.0.0.1:{api_port}/console/".encode() in output
        async with httpx.AsyncClient() as http:  # the API, beside the worker, answers
            assert (await http.get(f"http://127.0.0.1:{api_port}/livez")).status_code == 200
            assert (await http.get(f"http://127.0.0.1:{api_port}/v1/calls")).status_code == 401
        if b"Metrics   http" in output:  # a worker with Prometheus metrics is running
            async with httpx.AsyncClient() as http:
                resp = await http.get(f"http://127.0.0.1:{metrics_port}/metrics")
            assert resp.status_code == 200
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            await proc.wait()
        assert proc.returncode == 0
        assert not _port_open(port)  # the server went down with the command
        assert (tmp_path / "dev" / "temporal.db").is_file()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_start_refuses_a_port_someone_else_serves(temporal_server: DevStack, tmp_path: Path) -> None:
    other = DevStack(port=temporal_server.port, ui_port=free_port(), data_dir=tmp_path)
    with pytest.raises(DevStackError, match="already in use"):
        await other.start()
    assert not other.running


def test_free_ports_come_from_below_the_ephemeral_range() -> None:
    """The dev server's internal services take ephemeral ports as it starts; a port handed to
    its frontend from that range could be taken by one of them first (seen: the server
    panicked with "address already in use")."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert all(10_000 <= p < low for p in ports) and len(ports) > 1
    for p in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", p))  # free indeed
