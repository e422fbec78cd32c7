"""Operational commands: ``ringflow config``, ``ringflow temporal setup``, ``ringflow dev``.

Mounted by ``ringflow/cli/__init__.py``; each command reads the settings afresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import signal
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import typer
from aiohttp import web
from temporalio.runtime import Runtime

from ringflow.cli.run import START_TEMPORAL_HINT, require_simulator, run_async
from ringflow.codec import (
    CodecKeyError,
    EncryptionCodec,
    codec_from_settings,
    create_key_file,
    keyring_from_settings,
    local_key_file,
)
from ringflow.devstack import DevStack, DevStackError
from ringflow.logs import configure_logging
from ringflow.servers.codec import build_app
from ringflow.servers.codec import start as start_codec_server
from ringflow.settings import Settings, get_settings, masked
from ringflow.temporal_env import TemporalConfigError, connect_options, describe
from ringflow.temporal_setup import (
    ManagedElsewhere,
    SearchAttributeConflict,
    connect,
    register_search_attributes,
    set_retention,
)

if TYPE_CHECKING:
    from ringflow.servers.api import Beside

temporal_app = typer.Typer(help="Prepare a Temporal server for Ringflow.", no_args_is_help=True)


def config(
    json_out: bool = typer.Option(False, "--json", help="Print as one JSON object."),
) -> None:
    """Show the effective configuration (environment and defaults), secrets masked."""
    settings = get_settings()
    values = masked(settings)
    # How Temporal is reached (TLS, mTLS, API key from Temporal's client config), never the key.
    try:
        values["temporal_connection"] = describe(
            connect_options(settings.temporal_address, settings.temporal_namespace)
        )
    except TemporalConfigError as err:
        values["temporal_connection"] = f"invalid: {err}"
    if json_out:
        typer.echo(json.dumps(values, indent=2, sort_keys=True))
        return
    width = max(len(k) for k in values)
    for key, value in values.items():
        shown = "" if value is None else value
        typer.echo(f"{key:<{width}} = {shown}")


@temporal_app.command("setup")
def setup(
    address: str | None = typer.Option(
        None,
        "--address",
        help="HOST:PORT of the frontend (default RINGFLOW_TEMPORAL_ADDRESS, "
        "else TEMPORAL_ADDRESS or the Temporal config profile).",
    ),
    namespace: str | None = typer.Option(
        None, "--namespace", help="Namespace (default RINGFLOW_TEMPORAL_NAMESPACE, else TEMPORAL_NAMESPACE)."
    ),
    retention_days: int | None = typer.Option(
        None,
        "--retention-days",
        min=1,
        help="Also set the namespace's retention of closed calls (where the server allows it).",
    ),
    json_out: bool = typer.Option(
        False, "--json", help="Print one JSON object: namespace, address, retention."
    ),
) -> None:
    """Register Ringflow's search attributes on a namespace (idempotent).

    TLS, mTLS and API keys come from Temporal's client config (TEMPORAL_* variables or a
    TEMPORAL_CONFIG_FILE profile). On Temporal Cloud, search attributes and retention are
    managed with Cloud's own tools (tcld or the Cloud UI): this command says so.
    """
    settings = get_settings()
    address = address or settings.temporal_address
    namespace = namespace or settings.temporal_namespace

    async def run() -> str | None:
        try:
            # search attributes and retention carry no payloads: no key needed
            client = await connect(address, namespace, codec=EncryptionCodec(None))
        except Exception as err:
            typer.echo(f"error: cannot reach Temporal at {address}: {err}; {START_TEMPORAL_HINT}", err=True)
            raise typer.Exit(1) from None
        await register_search_attributes(client, namespace)
        if retention_days is not None:
            return await set_retention(client, namespace, retention_days)
        return None

    try:
        refused = run_async(run)
    except SearchAttributeConflict as err:
        typer.echo(f"error: search attribute type conflict: {err}", err=True)
        raise typer.Exit(1) from None
    except ManagedElsewhere as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None
    except typer.Exit:
        raise
    except Exception as err:
        typer.echo(f"error: cannot set up {namespace} at {address}: {err}", err=True)
        raise typer.Exit(1) from None
    if json_out:
        retention = (
            None
            if retention_days is None
            else ({"refused": refused} if refused else {"days": retention_days})
        )
        doc = {
            "namespace": namespace,
            "address": address,
            "search_attributes": "registered",
            "retention": retention,
        }
        typer.echo(json.dumps(doc))
        return
    typer.echo(f"search attributes registered on namespace {namespace!r} at {address}")
    if retention_days is not None:
        if refused:
            typer.echo(f"retention not changed: {refused}", err=True)
        else:
            typer.echo(f"retention of namespace {namespace!r} set to {retention_days} days")


def dev(
    port: int | None = typer.Option(
        None, "--port", help="Frontend gRPC port (default 7233, RINGFLOW_DEV_PORT)."
    ),
    ui_port: int | None = typer.Option(
        None, "--ui-port", help="Web UI port (default 8233, RINGFLOW_DEV_UI_PORT)."
    ),
    data_dir: Path | None = typer.Option(
        None,
        "--data-dir",
        help="Where Temporal's SQLite file, its logs and the local payload key go "
        "(default RINGFLOW_DATA_DIR, else ~/.local/share/ringflow).",
    ),
    demo: Path | None = typer.Option(
        None, "--demo", help="Once up, play this conversation script as a demo call."
    ),
    demo_kill_at: int | None = typer.Option(
        None, "--demo-kill-at", help="Kill the demo call's agent during turn N; it resumes."
    ),
) -> None:
    """Run a local Temporal server (SQLite, survives restarts) and a Ringflow worker."""
    settings = get_settings()
    overrides: dict[str, Any] = {}
    if data_dir is not None:
        overrides["data_dir"] = data_dir
        if "database_url" not in settings.model_fields_set:
            overrides["database_url"] = f"sqlite:///{data_dir / 'ringflow.db'}"
    stack = DevStack(
        port=port or settings.dev_port,
        ui_port=ui_port or settings.dev_ui_port,
        data_dir=data_dir or settings.data_dir,
        namespace=settings.temporal_namespace,
    )
    overrides["temporal_address"] = stack.address
    if demo is not None:  # the demo's flow is trusted like the working directory's
        require_simulator("ringflow dev --demo")
        from ringflow.simulation.simulator import flows_dir_with

        overrides["flows_dir"] = flows_dir_with(settings.flows_dir, [demo])
    # the terminal shows the stack's own lines; logs (stderr) only from warnings on, unless asked
    configure_logging(
        settings.log_level if "log_level" in settings.model_fields_set else "WARNING", settings.log_format
    )
    try:
        overrides.update(_dev_keys(settings.model_copy(update=overrides)))
    except CodecKeyError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None
    try:
        run_async(lambda: _run_dev(stack, settings.model_copy(update=overrides), demo, demo_kill_at))
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass  # Ctrl-C / SIGTERM: the server was stopped on the way out
    except DevStackError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None


async def _run_dev(
    stack: DevStack, settings: Settings, demo: Path | None = None, demo_kill_at: int | None = None
) -> None:
    main = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if main is not None:
        # SIGTERM (e.g. from a process manager) must still stop the server we started.
        loop.add_signal_handler(signal.SIGTERM, main.cancel)
    worker = _worker_module()
    # every port the stack needs is checked before anything starts: a busy one is an error
    runtime = _metrics_runtime(worker, settings) if worker is not None else None
    codec_runner = await _dev_codec_server(stack, settings)
    api: Beside | None = None
    try:
        await stack.start()
        typer.echo(f"Temporal  {stack.address}  (namespace {stack.namespace})")
        typer.echo(f"Web UI    {stack.ui_address}")
        if codec_runner is not None:
            typer.echo(
                f"Codec     {stack.ui_codec_endpoint}  (payloads encrypted with "
                f"{settings.codec_key_file or 'RINGFLOW_CODEC_KEYS'}; the UI decodes through it)"
            )
        typer.echo(f"Data      {stack.data_dir}  (server log: {stack.log_path})")
        if runtime is not None:
            typer.echo(f"Metrics   http://127.0.0.1:{settings.metrics_port}/metrics")
        if worker is None:
            typer.echo(
                "No worker is available yet (workflows.worker is missing); "
                "serving Temporal only. Ctrl-C to stop."
            )
            await asyncio.Event().wait()
            return
        client = await connect(
            stack.address,
            stack.namespace,
            runtime,
            codec=codec_from_settings(settings),
            envconfig=False,  # local plain gRPC even in a shell set up for Cloud
            refuse_plaintext_inputs=settings.encryption and not settings.allow_plaintext_inputs,
        )
        typer.echo(f"Worker    task queue {settings.task_queue!r}.")
        serving = asyncio.ensure_future(worker.run_worker_forever(client, settings))
        api = await _dev_api(settings, client)
        if demo is not None:
            from ringflow.simulation.demo import run_demo

            # the demo call's worker exports through the same runtime: its calls are counted
            await run_demo(
                stack.address,
                stack.ui_address,
                stack.namespace,
                demo,
                demo_kill_at,
                runtime=runtime,
                codec=codec_from_settings(settings),
            )
        typer.echo("\nThe stack keeps running for you to look around. Ctrl-C to stop.")
        await serving
    finally:
        if api is not None:
            await api.stop()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGTERM)
        stack.stop()
        if codec_runner is not None:
            await codec_runner.cleanup()


async def _dev_api(settings: Settings, client: Any) -> Beside | None:
    """``ringflow api`` beside the dev worker, on its client; a busy port or an install without
    the API's dependencies costs the API, not the dev session."""
    try:
        from ringflow.servers.api import serve_beside
    except ImportError:
        return None
    host, port = settings.api_host, settings.api_port
    try:
        serving = await serve_beside(settings, client, host, port)
    except (OSError, SystemExit) as err:
        typer.echo(f"API       not started: {err}")
        return None
    typer.echo(
        f"API       http://{host}:{port}/v1  (OpenAPI /openapi.json; a key: ringflow api-key create "
        "--scopes calls:read,calls:write)"
    )
    typer.echo(f"Console   http://{host}:{port}/console/")
    return serving


def _dev_keys(settings: Settings) -> dict[str, Any]:
    """Encryption on by default: without configured keys, the dev stack makes (once) and uses a
    local key in its data directory. The CLI in another shell finds it there; this process
    hands it to its worker and its demo call through the settings and the codec they get."""
    if not settings.encryption or settings.codec_keys is not None or settings.codec_key_file is not None:
        keyring_from_settings(settings)  # configured keys: only checked here, so errors come early
        return {}
    path = local_key_file(settings)
    create_key_file(path)  # or reads the one an earlier run made
    return {"codec_key_file": path}


async def _dev_codec_server(stack: DevStack, settings: Settings) -> web.AppRunner | None:
    """The codec server for the dev UI, on loopback without a token (the dev UI cannot send
    one). A busy port is an error (DevStackError): the UI would otherwise show ciphertext, or
    decode through whatever else serves that port."""
    ring = keyring_from_settings(settings)
    if ring is None or stack.headless or not settings.codec_server_port:
        return None
    host = "127.0.0.1"
    origins = [stack.ui_address, f"http://localhost:{stack.ui_port}"]
    codec = EncryptionCodec(ring, compress=settings.payload_compression)
    app = build_app(codec, token=None, cors_origins=origins)
    try:
        runner = await start_codec_server(app, host, settings.codec_server_port)
    except OSError as err:
        raise DevStackError(
            f"the codec server's port 127.0.0.1:{settings.codec_server_port} is not free "
            f"({err.strerror or err}): set RINGFLOW_CODEC_SERVER_PORT to a free port, or 0 to run "
            "without it (the UI then shows ciphertext)"
        ) from None
    stack.ui_codec_endpoint = f"http://{host}:{settings.codec_server_port}"
    return runner


def _worker_module() -> ModuleType | None:
    """``workflows.worker`` if it exists yet (and has ``run_worker_forever``), else None.

    Imported lazily: ``ringflow config`` and ``ringflow temporal setup`` must work without
    loading the workflow code.
    """
    try:
        module = importlib.import_module("ringflow.workflows.worker")
    except ModuleNotFoundError as err:
        if err.name in ("ringflow.workflows", "ringflow.workflows.worker"):
            return None
        raise
    return module if hasattr(module, "run_worker_forever") else None


def _metrics_runtime(worker: ModuleType, settings: Settings) -> Runtime | None:
    """The worker's Prometheus runtime on ``metrics_port`` (0 disables), if it offers one.

    A busy port is an error (DevStackError) naming the setting, not metrics silently missing.
    """
    make = getattr(worker, "prometheus_runtime", None)
    if make is None or not settings.metrics_port:
        return None
    try:
        runtime: Runtime = make(settings.metrics_port)
    except ValueError:  # "Failed starting Prometheus exporter: Address already in use"
        raise DevStackError(
            f"the metrics port 127.0.0.1:{settings.metrics_port} is not free: set "
            "RINGFLOW_METRICS_PORT to a free port, or 0 to run without metrics"
        ) from None
    return runtime
