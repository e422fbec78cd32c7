"""What the commands that talk to Temporal share: the error they exit with, the client (or a
clear message naming the address), the keyring required before call data is written, and
starting a call (``call start``, ``call dial``) with its ``--var`` values parsed and checked
against the flow before anything is sent.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ringflow.cli.run import START_TEMPORAL_HINT, run_async

if TYPE_CHECKING:  # each helper imports what it uses: `call list` needs no flow model
    from temporalio.client import Client

    from ringflow.callflow.model import FlowDefinition
    from ringflow.settings import Settings


def fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


async def temporal_client(settings: Settings) -> Client:
    import asyncio  # not with the module: `flow validate` imports it (through `flow canary`)

    from temporalio.service import RPCError

    from ringflow.codec import CodecKeyError
    from ringflow.temporal_setup import connect

    try:
        return await asyncio.wait_for(connect(settings.temporal_address, settings.temporal_namespace), 10)
    except CodecKeyError as exc:
        raise fail(str(exc)) from None
    except (RPCError, RuntimeError, TimeoutError, OSError) as exc:
        raise fail(
            f"cannot reach Temporal at {settings.temporal_address}: {exc or 'timed out'}; "
            f"{START_TEMPORAL_HINT}"
        ) from None


def start_flow_call(settings: Any, definition: Any, **call: Any) -> str:
    """Start a call's workflow (``call start`` and ``call dial``) and give back its id,
    turning a refused flow or a refusing server into a clear error."""
    from temporalio.service import RPCError

    from ringflow.callflow.errors import FlowError
    from ringflow.workflows.client import start_call

    async def go() -> str:  # the id, not the handle: a handle would keep the client alive
        client = await temporal_client(settings)
        handle = await start_call(
            client,
            definition,
            task_queue=settings.task_queue,
            agent_timeout_s=settings.call_agent_timeout_s,
            **call,
        )
        return handle.call_id

    try:
        return run_async(go)
    except FlowError as exc:
        raise fail("; ".join(str(e) for e in exc.errors)) from None
    except RPCError as exc:
        raise fail(f"Temporal refused the call: {exc}") from None


def check_vars(flow: Path, definition: FlowDefinition, variables: dict[str, Any]) -> None:
    """Before connecting: a misspelt ``--var`` would otherwise start a call whose template
    falls back silently, and a missing one would cost a round trip to learn it."""
    from ringflow.callflow.errors import did_you_mean
    from ringflow.callflow.inputs import resolve_variables

    declared = definition.flow.variables
    errors = [
        f"--var {name}: the flow declares no variable '{name}'{did_you_mean(name, declared)}"
        for name in variables
        if name not in declared
    ]
    errors += [str(issue) for issue in resolve_variables(definition.flow, variables)[1]]
    if errors:
        for e in errors:
            typer.echo(f"{flow}: error: {e}", err=True)
        raise typer.Exit(1)


def require_keys(settings: Settings) -> None:
    """Processes that write call data into Temporal refuse to do so in clear by accident."""
    from ringflow.codec import CodecKeyError, require_keyring

    try:
        require_keyring(settings)
    except CodecKeyError as exc:
        raise fail(str(exc), 2) from None


def parse_vars(pairs: list[str]) -> dict[str, Any]:
    from ringflow.callflow.inputs import coerce_cli_value

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise fail(f"--var takes NAME=VALUE, got {pair!r}", 2)
        out[key.strip()] = coerce_cli_value(value)
    return out
