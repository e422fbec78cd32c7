"""``ringflow journey ...``: start, list, show and cancel journeys (one person's calls of
one flow, ``workflows/journey.py``).

A journey's id carries a hash of the person's number, never the number: ``list`` finds
journeys by flow and status (``RingflowJourney``, ``RingflowStatus``), ``show`` gives a
journey's calls on one timeline.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer

from ringflow.cli.run import run_async
from ringflow.cli.sip import _load
from ringflow.cli.temporal import check_vars, fail, parse_vars, require_keys, temporal_client

journey_app = typer.Typer(
    help="Journeys: one person's calls of one flow, with follow-ups and callbacks.", no_args_is_help=True
)


def _when(at: float | None) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%SZ") if at is not None else "-"


@journey_app.command("start")
def start(
    phone: str = typer.Argument(..., help="The person's number, E.164 (+12125550123)."),
    flow: Path = typer.Option(..., "--flow", help="Flow file every call of the journey runs."),
    timezone: str | None = typer.Option(
        None, "--timezone", help="The person's IANA timezone (default: from the number, else UTC)."
    ),
    window: list[str] = typer.Option(
        ["always"], "--window", help="Calling window in the person's time, e.g. 'Mon-Fri 09:00-20:00'."
    ),
    var: list[str] = typer.Option([], "--var", help="NAME=VALUE (repeatable)."),
    retry: list[str] = typer.Option(
        [], "--retry", help="OUTCOME=COUNT/DELAY: place a call that missed again, e.g. no_answer=3/2h."
    ),
    no_call: bool = typer.Option(False, "--no-call", help="Place no call now: wait for a callback."),
    from_number: str | None = typer.Option(None, "--from", help="Caller id (default RINGFLOW_SIP_FROM)."),
    trunk: str | None = typer.Option(None, "--trunk", help="Outbound trunk (default RINGFLOW_SIP_TRUNK_ID)."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Start the person's journey of the flow (its first call at once unless --no-call)."""
    from temporalio.exceptions import WorkflowAlreadyStartedError
    from temporalio.service import RPCError

    from ringflow.activities.campaign_rules import RuleError, parse_retry
    from ringflow.callflow.errors import FlowError
    from ringflow.contract.journey import JourneyRetry
    from ringflow.settings import get_settings
    from ringflow.workflows.journey_client import start_journey

    try:
        retries = {o: JourneyRetry(count=r.count, delay_s=r.delay_s) for o, r in map(parse_retry, retry)}
    except RuleError as exc:
        raise fail(str(exc), 2) from None

    settings = get_settings()
    require_keys(settings)
    definition = _load(flow)
    variables = parse_vars(var)
    check_vars(flow, definition, variables)

    async def go() -> str:
        client = await temporal_client(settings)
        handle = await start_journey(
            client,
            definition,
            phone,
            task_queue=settings.task_queue,
            secret=settings.journey_secret,
            timezone=timezone,
            windows=window,
            variables=variables,
            first_call=not no_call,
            retry=retries,
            from_number=from_number or settings.sip_from,
            trunk_id=trunk or settings.sip_trunk_id,
            agent_timeout_s=settings.call_agent_timeout_s,
        )
        return handle.journey_id

    try:
        journey_id = run_async(go)
    except FlowError as exc:
        raise fail("; ".join(str(e) for e in exc.errors), 2) from None
    except WorkflowAlreadyStartedError:
        raise fail("this person already has an open journey of this flow (ringflow journey list)") from None
    except RPCError as exc:
        raise fail(f"Temporal refused the journey: {exc}") from None
    typer.echo(json.dumps({"journey_id": journey_id}) if json_out else journey_id)


@journey_app.command("list")
def list_journeys(
    flow: str | None = typer.Option(None, "--flow", help="Only this flow's journeys."),
    status: str | None = typer.Option(None, "--status", help="calling, scheduled, open or ended."),
    limit: int = typer.Option(50, "--limit", min=1),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Journeys known to Temporal, newest first."""
    from ringflow.journeys import list_journeys as journeys_of
    from ringflow.settings import get_settings

    settings = get_settings()

    async def go() -> list[dict[str, Any]]:
        return await journeys_of(await temporal_client(settings), flow, status, limit)

    rows = run_async(go)
    if json_out:
        typer.echo(json.dumps(rows))
        return
    for r in rows:
        typer.echo(
            f"{r['journey_id']}  {r['status'] or '-':<10} {r['workflow'] or '-':<10} {r['started_at']}"
        )


def _view(journey_id: str, cancel: bool = False) -> Any:
    """The journey (``cancel``: once asked to place no further call), or a clear error."""
    from temporalio.service import RPCError

    from ringflow.codec import CodecKeyError
    from ringflow.journeys import (
        JourneyEnded,
        JourneyNotFound,
        NoWorkerAnswered,
        cancel_journey,
        read_journey,
    )
    from ringflow.settings import get_settings

    settings = get_settings()

    async def go() -> Any:
        client = await temporal_client(settings)
        return await (cancel_journey if cancel else read_journey)(client, journey_id)

    try:
        return run_async(go)
    except CodecKeyError as exc:  # the journey's payloads are encrypted with a key not here
        raise fail(str(exc)) from None
    except JourneyNotFound:
        raise fail(f"no journey '{journey_id}' (ringflow journey list)") from None
    except (JourneyEnded, NoWorkerAnswered) as exc:
        raise fail(str(exc)) from None
    except RPCError as exc:
        raise fail(f"Temporal refused the {'cancel' if cancel else 'query'}: {exc}") from None


@journey_app.command("show")
def show(journey_id: str = typer.Argument(...), json_out: bool = typer.Option(False, "--json")) -> None:
    """A journey's calls on one timeline, its state and its next call."""
    view = _view(journey_id)
    if json_out:
        typer.echo(view.model_dump_json())
        return
    typer.echo(f"{view.journey_id}  flow {view.flow}  {view.status}" + (f" ({view.end})" if view.end else ""))
    earlier = view.calls_total - len(view.calls)
    if earlier:
        typer.echo(f"  ... {earlier} earlier calls")
    for c in view.calls:
        typer.echo(f"  {_when(c.started_at)}  #{c.n:<3} {c.call_id}  {c.summary}")
    if view.active_call:
        typer.echo(f"  now: call {view.active_call} is live")
    if view.follow_up is not None:
        fu = view.follow_up
        typer.echo(f"  next: {_when(fu.due_at)} at node {fu.node or '(start)'} ({fu.why})")
    if view.held:
        typer.echo("  held: its campaign is paused; the next call waits for the resume")
    elif view.open_until is not None and view.status == "open":
        typer.echo(f"  open for a callback until {_when(view.open_until)}")
    if view.state or view.extracted:
        typer.echo(f"  state: {json.dumps(view.state)}  extracted: {json.dumps(view.extracted)}")
    for note in view.notes:
        typer.echo(f"  note: {note}")


@journey_app.command("cancel")
def cancel(journey_id: str = typer.Argument(...), json_out: bool = typer.Option(False, "--json")) -> None:
    """No further call of the journey; a call live now finishes as it would (never cut)."""
    _view(journey_id, cancel=True)
    typer.echo(
        json.dumps({"journey_id": journey_id, "cancelled": True}) if json_out else f"{journey_id}: cancelled"
    )
