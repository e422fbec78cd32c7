"""Every client Ringflow connects runs on a runtime that forwards the SDK core's log lines to
Python's logging (``workflows/core_logs.py``): the core's own printer writes them on stdout,
where a command's ``--json`` document is (``campaign simulate --json`` once began with one)."""

from __future__ import annotations

from ringflow.core_logs import CORE_LOGGER, core_logging, forwarding_runtime
from ringflow.devstack import DevStack
from ringflow.temporal_setup import connect


async def test_clients_forward_the_cores_log_lines_to_python_logging(temporal_server: DevStack) -> None:
    client = await connect(temporal_server.address)
    assert client.service_client.config.runtime is forwarding_runtime()
    again = await connect(temporal_server.address)
    assert again.service_client.config.runtime is client.service_client.config.runtime  # one pool
    config = core_logging()
    assert config.forwarding is not None and config.forwarding.logger is CORE_LOGGER
