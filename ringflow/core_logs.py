"""Where the Temporal SDK core's own log lines go: to Python's ``logging``.

Left to itself the core (Rust) prints its warnings on the process's standard output, in
colour: in a CLI command that is where its ``--json`` document is, and a core warning
during ``campaign simulate --json`` came out in front of it, so the document did not
parse. Forwarded, they are records of the ``temporalio.core`` logger, which a command sends
to standard error and a worker formats as it formats its own (``ringflow/logs.py``); a
worker with metrics passes :func:`core_logging` to its runtime (``ringflow/servers/worker.py``)."""

from __future__ import annotations

import logging

from temporalio.runtime import LogForwardingConfig, LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter

CORE_LOGGER = logging.getLogger("temporalio.core")
_runtime: Runtime | None = None


def core_logging() -> LoggingConfig:
    """The SDK's default levels (core WARN, the rest ERROR), forwarded to ``CORE_LOGGER``."""
    return LoggingConfig(
        filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
        forwarding=LogForwardingConfig(logger=CORE_LOGGER),
    )


def forwarding_runtime() -> Runtime:
    """This process's runtime for clients that bring none: one, made on first use (each
    runtime has a thread pool of its own)."""
    global _runtime
    if _runtime is None:
        _runtime = Runtime(telemetry=TelemetryConfig(logging=core_logging()))
    return _runtime
