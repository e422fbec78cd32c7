"""``ringflow call dial`` and ``ringflow sip ...``: real phone calls through LiveKit SIP.

``call dial`` starts a call whose workflow places it (``workflows/dialing.py``); ``sip
setup`` and ``sip list`` manage the inbound side: the trunk that receives a number's calls
and the dispatch rule sending them to the Ringflow agent with the flow in the metadata.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import typer

from ringflow.cli.run import run_async
from ringflow.cli.temporal import check_vars, fail, parse_vars, require_keys, start_flow_call, temporal_client
from ringflow.contract.ids import call_workflow_id

# Each command imports what it uses (the flow model, pydantic, the settings): `ringflow call`
# mounts `dial` from here, and `call list` should not pay for it.

OPTION = {
    "to": "--to",
    "from_number": "--from",
    "trunk_id": "--trunk",
    "ringing_timeout_s": "--ringing-timeout",
}


def dial(
    flow: str = typer.Argument(
        ..., help="Flow file (published on the fly), NAME, NAME@VERSION or NAME@CHANNEL."
    ),
    to: str = typer.Option(..., "--to", help="The number to call, e.g. +15550100."),
    from_number: str | None = typer.Option(None, "--from", help="Caller id (default RINGFLOW_SIP_FROM)."),
    trunk: str | None = typer.Option(None, "--trunk", help="Outbound trunk (default RINGFLOW_SIP_TRUNK_ID)."),
    ringing_timeout: float | None = typer.Option(
        None, "--ringing-timeout", help="Seconds to ring (default RINGFLOW_SIP_RINGING_TIMEOUT_S)."
    ),
    var: list[str] = typer.Option([], "--var", "-v", help="A call variable, NAME=VALUE (repeatable)."),
    call_id: str | None = typer.Option(None, "--call-id", help="Default: a new random id."),
    campaign: str | None = typer.Option(None, "--campaign", help="Campaign id (searchable)."),
    json_out: bool = typer.Option(False, "--json", help="Print the started call as JSON."),
) -> None:
    """Place a phone call running FLOW: the workflow creates the room, dispatches the agent and
    dials through LiveKit SIP; the last line printed is the call id."""
    from pydantic import ValidationError

    from ringflow.contract.dial import Dial
    from ringflow.settings import get_settings

    settings = get_settings()
    require_keys(settings)  # the call's number and variables go into Temporal
    if to.strip().startswith("+") and any(ch.isalpha() for ch in to):  # a keypad's letters: a typo
        raise fail(f"--to: '{to[:32]}' has letters: write the number in digits", 2)
    try:
        target = Dial(
            to=to,
            from_number=from_number or settings.sip_from,
            trunk_id=trunk or settings.sip_trunk_id,
            ringing_timeout_s=settings.sip_ringing_timeout_s if ringing_timeout is None else ringing_timeout,
        )
    except ValidationError as exc:
        raise fail(
            "; ".join(f"{OPTION.get(str(e['loc'][0]), e['loc'][0])}: {e['msg']}" for e in exc.errors()), 2
        ) from None
    if not target.trunk_id:
        raise fail("no SIP trunk: pass --trunk or set RINGFLOW_SIP_TRUNK_ID", 2)
    from ringflow.cli.flow_versions import load_ref
    from ringflow.workflows.client import new_call_id

    call_id = call_id or new_call_id()  # before resolving: a canary splits calls by their id
    definition, version = load_ref(flow, settings.database_url, call_id=call_id)
    variables = parse_vars(var)
    check_vars(Path(flow), definition, variables)  # as `call start` does, before connecting

    started = start_flow_call(
        settings,
        definition,
        flow_ref=version.ref,
        call_id=call_id,
        variables=variables,
        campaign_id=campaign,
        dial=target,
    )
    if json_out:
        typer.echo(
            json.dumps(
                {
                    "call_id": started,
                    "workflow_id": call_workflow_id(started),
                    "flow": definition.flow.flow,
                    "flow_ref": f"{version.name}@{version.version}",
                    "to": target.to,
                    "room": started,
                }
            )
        )
        return
    typer.echo(
        f"dialing {target.to} for {definition.flow.flow} v{definition.flow.version} as workflow "
        f"{call_workflow_id(started)}"
    )
    typer.echo(started)


def _load(flow: Path) -> Any:
    from ringflow.activities.flow_store import version_source
    from ringflow.callflow.errors import FlowError
    from ringflow.callflow.loader import load_flow
    from ringflow.settings import get_settings

    try:
        return load_flow(flow, versions=version_source(get_settings().database_url))
    except FileNotFoundError as exc:
        raise fail(str(exc), 2) from None
    except FlowError as exc:
        for e in exc.errors:
            typer.echo(f"{flow}: error: {e}", err=True)
        raise typer.Exit(1) from None


def webhooks(
    port: int = typer.Option(8090, "--port", help="Port to listen on."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (0.0.0.0 in a pod)."),
) -> None:
    """Receive LiveKit's webhooks (POST /livekit/webhook) and relay them to the calls' workflows:
    a lost agent is replaced at once, a caller who hangs up ends the call."""
    from ringflow.agents.webhooks import WEBHOOK_PATH
    from ringflow.logs import configure_logging
    from ringflow.servers.webhook_relay import start_relay
    from ringflow.settings import get_settings

    settings = get_settings()
    if not settings.livekit_api_key or not settings.livekit_api_secret:
        raise fail("ringflow webhooks needs LIVEKIT_API_KEY and LIVEKIT_API_SECRET (to verify signatures)", 2)
    configure_logging(settings.log_level, settings.log_format)

    async def go() -> None:
        client = await temporal_client(settings)
        runner = await start_relay(settings, client, host, port)
        typer.echo(f"LiveKit webhooks on http://{host}:{port}{WEBHOOK_PATH}", err=True)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    try:
        run_async(go)
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        raise fail(f"cannot listen on {host}:{port}: {exc}") from None


sip_app = typer.Typer(help="Inbound numbers on LiveKit SIP: trunks and dispatch rules.", no_args_is_help=True)
_NUMBER = re.compile(r"^\+?[0-9]{3,20}$")


def _inbound(settings: Any) -> Any:
    from ringflow.agents.livekit_inbound import LiveKitInbound

    try:
        return LiveKitInbound(
            settings.livekit_url,
            settings.livekit_api_key,
            settings.livekit_api_secret.get_secret_value() if settings.livekit_api_secret else None,
            agent_name=settings.agent_name,
        )
    except ValueError as exc:
        raise fail(str(exc), 2) from None


def _livekit_call(coro: Any) -> Any:
    from ringflow.agents.livekit_api import LiveKitError

    try:
        return asyncio.run(coro)
    except LiveKitError as exc:
        raise fail(str(exc)) from None


@sip_app.command()
def setup(
    number: str = typer.Option(..., "--number", help="The phone number callers dial, e.g. +15550100."),
    flow: str = typer.Option(
        ...,
        "--flow",
        help="Flow the agent runs: a file (its path there), or NAME, NAME@VERSION, NAME@CHANNEL "
        "(resolved at each call: a channel follows promotions).",
    ),
    trunk: str | None = typer.Option(None, "--trunk", help="An existing inbound trunk to add the number to."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object."),
) -> None:
    """Create or update (idempotently) the inbound trunk and the dispatch rule that sends the
    number's calls to the Ringflow agent with FLOW."""
    if not _NUMBER.match(number):
        raise fail(f"--number: expected digits with an optional leading +, got {number!r}", 2)
    from ringflow.activities.flow_store import FlowRefError, is_file_ref, resolve

    if Path(flow).exists():
        _load(Path(flow))  # a flow with errors is refused here, not at the first call
    elif not is_file_ref(flow):
        from ringflow.settings import get_settings as settings_now

        try:  # a name that resolves to nothing is refused here, not at the first call
            resolve(settings_now().database_url, flow)
        except FlowRefError as exc:
            raise fail(str(exc), 2) from None
    else:
        typer.echo(f"note: {flow} is not here; the agent must find it (RINGFLOW_FLOWS_DIR)", err=True)
    from ringflow.settings import get_settings

    done = _livekit_call(_inbound(get_settings()).setup(number, flow, trunk))
    if json_out:
        typer.echo(json.dumps(done.__dict__))
        return
    what = (
        ", ".join([f"created {x}" for x in done.created] + [f"updated {x}" for x in done.updated])
        or "already set up"
    )
    typer.echo(f"{number} -> {flow}: trunk {done.trunk_id}, dispatch rule {done.rule_id} ({what})")


@sip_app.command("list")
def list_numbers(json_out: bool = typer.Option(False, "--json", help="One JSON array.")) -> None:
    """Inbound trunks, their numbers, and the flow each number's calls run."""
    from ringflow.settings import get_settings

    rows = _livekit_call(_inbound(get_settings()).list())
    if json_out:
        typer.echo(json.dumps(rows))
        return
    if not rows:
        typer.echo("no inbound trunks")
        return
    cols = ["number", "trunk_id", "rule_id", "flow", "agent"]
    table = [cols] + [[str(r.get(c) or "-") for c in cols] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    for row in table:
        typer.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
