"""``ringflow campaign ...``: start, watch, steer and report outbound campaigns.

Everything the command can check is checked before anything is stored or started: the
contacts (line by line), the rules (windows, retries), the flow, and that Redis (the
trunk's pacer) is configured and answers.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ringflow.cli.run import require_simulator, run_async
from ringflow.cli.sip import _load
from ringflow.cli.temporal import fail, require_keys, temporal_client
from ringflow.contract.ids import CAMPAIGN_WORKFLOW_PREFIX, campaign_workflow_id

if TYPE_CHECKING:  # each command imports what it uses: `campaign --help` loads none of it
    from ringflow.activities.campaign_rules import RetryRule, Windows
    from ringflow.settings import Settings

campaign_app = typer.Typer(
    help="Outbound campaigns: many calls, paced, in calling windows, retried.", no_args_is_help=True
)


def rules(window: list[str], skip_date: list[str], retry: list[str]) -> tuple[Windows, dict[str, RetryRule]]:
    from ringflow.activities.campaign_rules import RuleError, parse_retry, parse_windows

    try:
        windows = parse_windows(window, skip_date)
        retries = dict(parse_retry(r) for r in retry)
    except RuleError as exc:
        raise fail(str(exc), 2) from None
    return windows, retries


def check_redis(settings: Settings) -> None:
    """Pacing is one limiter per trunk in Redis, shared by every campaign: no Redis, no campaign."""
    if not settings.redis_url:
        raise fail(
            "campaigns need Redis for pacing (one limiter per trunk, shared by every campaign "
            "and worker): set RINGFLOW_REDIS_URL, e.g. redis://127.0.0.1:6379/0",
            2,
        )
    from redis import Redis
    from redis.exceptions import RedisError

    try:
        Redis.from_url(settings.redis_url, socket_connect_timeout=3).ping()
    except (RedisError, OSError, ValueError) as exc:
        raise fail(
            f"Redis at RINGFLOW_REDIS_URL does not answer ({type(exc).__name__}): campaigns need it "
            "for pacing",
            2,
        ) from None


def check_telephony(settings: Settings, trunk: str) -> None:
    """Calls go out through a LiveKit SIP trunk: LiveKit configured, answering, and holding
    that outbound trunk, checked before any contact is stored or claimed (without it, every
    contact would end ``dial_failed`` within seconds)."""
    from ringflow.agents.livekit_sip import LiveKitTelephony

    secret = settings.livekit_api_secret.get_secret_value() if settings.livekit_api_secret else None
    try:
        phone = LiveKitTelephony(settings.livekit_url, settings.livekit_api_key, secret)
    except ValueError as exc:  # names the LIVEKIT_* variables missing
        raise fail(f"campaigns dial through a LiveKit SIP trunk: {exc}", 2) from None

    async def ask() -> str | None:
        try:
            return await asyncio.wait_for(phone.trunk_problem(trunk), 15)
        except TimeoutError:
            return f"LiveKit at {settings.livekit_url} did not answer within 15 s: check LIVEKIT_URL"

    if (problem := asyncio.run(ask())) is not None:
        raise fail(problem, 2)


@campaign_app.command("start")
def start(
    contacts: Path = typer.Argument(..., help="CSV (phone, timezone, variables...) or JSONL contacts."),
    flow: str = typer.Option(
        ...,
        "--flow",
        help="Flow each call runs: a file (published on the fly), NAME, NAME@VERSION or NAME@CHANNEL.",
    ),
    trunk: str | None = typer.Option(None, "--trunk", help="Outbound trunk (default RINGFLOW_SIP_TRUNK_ID)."),
    from_number: str | None = typer.Option(None, "--from", help="Caller id (default RINGFLOW_SIP_FROM)."),
    max_concurrent: int = typer.Option(10, "--max-concurrent", help="Calls in flight at most."),
    cps: float = typer.Option(1.0, "--cps", help="Call attempts per second on the trunk (all campaigns)."),
    max_attempts: int = typer.Option(3, "--max-attempts", help="Dials per contact at most."),
    window: list[str] = typer.Option(
        ["Mon-Fri 09:00-20:00"], "--window", help="Calling window in the contact's local time (repeatable)."
    ),
    skip_date: list[str] = typer.Option(
        [], "--skip-date", help="A date (YYYY-MM-DD) not to call (repeatable)."
    ),
    retry: list[str] = typer.Option(
        [], "--retry", help="OUTCOME=COUNT/DELAY, e.g. no_answer=3/2h (repeatable)."
    ),
    dnc: Path | None = typer.Option(None, "--dnc", help="Do-not-call numbers to add (one a line)."),
    default_tz: str | None = typer.Option(
        None, "--default-timezone", help="For numbers whose country spans several timezones."
    ),
    campaign_id: str | None = typer.Option(None, "--id", help="Campaign id (default: a new one)."),
    journeys: bool | None = typer.Option(
        None,
        "--journeys/--no-journeys",
        help="Start each contact's journey (retries and follow-ups in one place) instead of single "
        "calls (default: when the flow has a journey: block).",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the started campaign as JSON."),
) -> None:
    """Store CONTACTS and start the campaign's workflow; the last line printed is its id."""
    from pydantic import ValidationError
    from temporalio.service import RPCError

    from ringflow.campaigns import ContactsError, campaign_input, load_contacts, load_dnc, start_campaign
    from ringflow.cli.progress import Progress
    from ringflow.settings import get_settings

    settings = get_settings()
    require_keys(settings)
    windows, retries = rules(window, skip_date, retry)
    trunk = trunk or settings.sip_trunk_id
    if not trunk:
        raise fail("no SIP trunk: pass --trunk or set RINGFLOW_SIP_TRUNK_ID", 2)
    from ringflow.cli.flow_versions import load_ref

    # the campaign pins the version: its calls and their retries keep it, whatever is promoted
    definition, version = load_ref(flow, settings.database_url)
    try:
        people = load_contacts(contacts, definition, default_tz)
        blocked = load_dnc(dnc) if dnc else []
        inp = campaign_input(
            settings,
            definition,
            campaign_id or uuid.uuid4().hex[:12],
            trunk=trunk,
            from_number=from_number,
            limits={"max_concurrent": max_concurrent, "cps": cps, "max_attempts": max_attempts},
            windows=windows,
            retries=retries,
            flow_ref=version.ref,
            journeys=journeys,
            ref=flow,
        )
    except ContactsError as exc:
        raise fail(str(exc), 2) from None
    except ValidationError as exc:
        raise fail(
            "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors()), 2
        ) from None
    check_redis(settings)
    check_telephony(settings, trunk)

    progress = Progress(len(people), "contacts imported", quiet=json_out)

    async def go() -> None:
        client = await temporal_client(settings)
        await start_campaign(
            client,
            inp,
            people,
            database_url=settings.database_url,
            task_queue=settings.task_queue,
            dnc=blocked,
            on_import=lambda n: progress.update(n, "contacts imported"),
        )

    try:
        run_async(go)
    except RPCError as exc:
        raise fail(f"Temporal refused the campaign: {exc}") from None
    finally:
        progress.done()
    if json_out:
        typer.echo(
            json.dumps(
                {
                    "campaign_id": inp.campaign_id,
                    "workflow_id": campaign_workflow_id(inp.campaign_id),
                    "contacts": len(people),
                    "flow": definition.flow.flow,
                }
            )
        )
        return
    typer.echo(
        f"campaign of {len(people)} contacts for {definition.flow.flow} started as workflow "
        f"{campaign_workflow_id(inp.campaign_id)}"
    )
    typer.echo(inp.campaign_id)


async def _progress(settings: Settings, campaign_id: str) -> dict[str, Any]:
    from ringflow.campaigns import CampaignNotFound, campaign_progress

    client = await temporal_client(settings)
    try:
        return await campaign_progress(client, settings.database_url, campaign_id)
    except CampaignNotFound as exc:
        raise fail(str(exc)) from None


def _show(p: dict[str, Any]) -> str:
    contacts = ", ".join(f"{k} {v}" for k, v in sorted(p.get("contacts", {}).items()))
    line = f"{p['campaign_id']}: {p.get('status') or p.get('workflow')}"
    if "live" in p:
        line += f" · live {p['live']} · {p.get('attempts_last_minute', 0)} attempts in the last minute"
    if p.get("journeys"):
        line += f" · open journeys {p['journeys']}"
    if p.get("pause_reason"):
        line += f" · paused: {p['pause_reason']}"
    if canary := p.get("canary"):
        how = canary.get("settled") or f"splitting {canary.get('percent', 0):g}% to {canary.get('candidate')}"
        line += f" · canary {canary.get('canary_id')}: {how}"
    if p.get("next_due") and p.get("status") == "running" and not p.get("live"):
        line += f" · next due in {max(0, p['next_due'] - time.time()):.0f} s"
    return line + f"\n  contacts: {contacts or 'none'}"


@campaign_app.command("status")
def status(
    campaign_id: str = typer.Argument(...),
    watch: bool = typer.Option(False, "--watch", help="Refresh until the campaign ends."),
    interval: float = typer.Option(2.0, "--interval", min=0.1, help="Seconds between refreshes (--watch)."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Progress: contacts by state, calls live now, attempts in the last minute, the next due time.
    With --watch it redraws in place on a terminal (one block per refresh when piped) and
    exits when the campaign ends."""
    from ringflow.settings import get_settings

    settings = get_settings()
    redraw = watch and not json_out and sys.stdout.isatty()
    drawn = 0
    while True:
        p = run_async(lambda: _progress(settings, campaign_id))
        text = json.dumps(p) if json_out else _show(p)
        if redraw and drawn:
            typer.echo(f"\x1b[{drawn}F\x1b[J", nl=False)  # back to the block's start, clear below
        typer.echo(text)
        drawn = text.count("\n") + 1
        if not watch or p.get("status") in ("finished", "cancelled") or p.get("workflow") != "RUNNING":
            return
        time.sleep(interval)


def _control(name: str, campaign_id: str, arg: Any = None) -> Any:
    from temporalio.service import RPCError

    from ringflow.campaigns import campaign_handle
    from ringflow.settings import get_settings

    settings = get_settings()

    async def go() -> Any:
        client = await temporal_client(settings)
        handle = campaign_handle(client, campaign_id)
        try:
            if arg is None:
                return await handle.execute_update(name)
            return await handle.execute_update(name, arg)
        except RPCError as exc:
            raise fail(f"campaign '{campaign_id}': {exc.message}") from None

    return run_async(go)


def _say(json_out: bool, campaign_id: str, result: Any) -> None:
    if hasattr(result, "model_dump"):  # Limits
        result = result.model_dump()
    typer.echo(
        json.dumps({"campaign_id": campaign_id, "result": result}) if json_out else f"{campaign_id}: {result}"
    )


@campaign_app.command("pause")
def pause(
    campaign_id: str = typer.Argument(...),
    reason: str | None = typer.Option(None, "--reason"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """No new dials until resumed; live calls go on."""
    _say(json_out, campaign_id, _control("pause", campaign_id, reason))


@campaign_app.command("resume")
def resume(campaign_id: str = typer.Argument(...), json_out: bool = typer.Option(False, "--json")) -> None:
    _say(json_out, campaign_id, _control("resume", campaign_id))


@campaign_app.command("cancel")
def cancel(campaign_id: str = typer.Argument(...), json_out: bool = typer.Option(False, "--json")) -> None:
    """No new dials; the calls live now finish as they would (never cut)."""
    _say(json_out, campaign_id, _control("cancel", campaign_id))


@campaign_app.command("limits")
def limits(
    campaign_id: str = typer.Argument(...),
    max_concurrent: int | None = typer.Option(None, "--max-concurrent"),
    cps: float | None = typer.Option(None, "--cps"),
    max_attempts: int | None = typer.Option(None, "--max-attempts"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Change a running campaign's limits."""
    from pydantic import ValidationError

    from ringflow.workflows.campaign_messages import LimitsChange

    try:
        change = LimitsChange(max_concurrent=max_concurrent, cps=cps, max_attempts=max_attempts)
    except ValidationError as exc:
        raise fail(
            "; ".join(f"--{str(e['loc'][0]).replace('_', '-')}: {e['msg']}" for e in exc.errors()), 2
        ) from None
    _say(json_out, campaign_id, _control("set_limits", campaign_id, change))


@campaign_app.command("list")
def list_campaigns(
    json_out: bool = typer.Option(False, "--json"), limit: int = typer.Option(50, "--limit")
) -> None:
    """Campaigns known to Temporal, newest first."""
    from ringflow.listing import workflow_rows
    from ringflow.settings import get_settings

    settings = get_settings()

    async def go() -> list[dict[str, Any]]:
        client = await temporal_client(settings)
        query = "WorkflowType = 'CampaignWorkflow'"
        return await workflow_rows(
            client, query, limit, id_key="campaign_id", prefix=CAMPAIGN_WORKFLOW_PREFIX
        )

    rows = run_async(go)
    if json_out:
        typer.echo(json.dumps(rows))
        return
    for r in rows:
        typer.echo(f"{r['campaign_id']}  {r['status'] or '-':<11} {r['flow'] or '-':<24} {r['started_at']}")


@campaign_app.command("report")
def report(
    campaign_id: str = typer.Argument(...),
    csv_out: bool = typer.Option(False, "--csv"),
    json_out: bool = typer.Option(False, "--json"),
    summary: bool = typer.Option(False, "--summary", help="Only the figures: states, dispositions, success."),
) -> None:
    """One row per contact: attempts, final state and outcome, disposition, extracted variables,
    the last call's analysis (success, score) and recording; then the campaign's figures."""
    from ringflow.activities import campaign_store as store
    from ringflow.campaigns import report_csv
    from ringflow.settings import get_settings

    rows = store.report(get_settings().database_url, campaign_id)
    if not rows:
        raise fail(f"no contacts for campaign '{campaign_id}'")
    figures = store.aggregate(rows)
    if json_out:
        typer.echo(json.dumps(figures if summary else rows, default=str))
        return
    if summary:
        for key, value in figures.items():
            typer.echo(f"{key:<14} {value if value is not None else '-'}")
        return
    text = report_csv(rows)
    if csv_out:
        typer.echo(text, nl=False)
        return
    for line in text.splitlines():
        typer.echo(line.replace(",", "  "))
    rate, score = figures["success_rate"], figures["average_score"]
    typer.echo(
        f"{figures['contacts']} contacts; dispositions {figures['dispositions'] or '-'}; "
        f"success rate {'-' if rate is None else f'{rate:.0%}'} of {figures['analysed']} analysed; "
        f"average score {'-' if score is None else f'{score:.2f}'}"
    )


@campaign_app.command("simulate")
def simulate(
    contacts: Path = typer.Argument(..., help="CSV or JSONL contacts, as for `campaign start`."),
    flow: Path = typer.Option(..., "--flow", help="Flow file each call runs."),
    answers: str = typer.Option(
        "human=0.4,no_answer=0.3,busy=0.1,voicemail=0.2",
        "--answers",
        help="How dialed numbers answer: KIND=WEIGHT,... (human, no_answer, busy, voicemail, failed).",
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the answers' draw."),
    time_scale: float = typer.Option(3600.0, "--time-scale", help="Retry delays are divided by this."),
    max_concurrent: int = typer.Option(20, "--max-concurrent"),
    cps: float = typer.Option(20.0, "--cps"),
    max_attempts: int = typer.Option(3, "--max-attempts"),
    window: list[str] = typer.Option(["always"], "--window", help="Calling window (default: always)."),
    retry: list[str] = typer.Option(["no_answer=2/2h", "busy=1/30m", "voicemail=1/4h"], "--retry"),
    default_tz: str | None = typer.Option(None, "--default-timezone"),
    address: str | None = typer.Option(
        None, "--address", help="Temporal to use (default: an embedded dev server)."
    ),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Run a campaign through the real workflows against the LiveKit fake; print what happened."""
    require_simulator("ringflow campaign simulate")
    from pydantic import ValidationError

    from ringflow.activities.campaign_rules import RuleError
    from ringflow.activities.campaign_store import FINAL
    from ringflow.campaigns import ContactsError, load_contacts
    from ringflow.cli.progress import Progress
    from ringflow.settings import get_settings
    from ringflow.simulation.campaign import parse_answers, simulate_campaign
    from ringflow.workflows.campaign_messages import CampaignInput, Limits

    settings = get_settings()
    if address is not None:  # a server that outlives the command keeps the calls: encrypted
        require_keys(settings)
    windows, retries = rules(window, [], retry)
    definition = _load(flow)
    try:
        weights = parse_answers(answers)
        people = load_contacts(contacts, definition, default_tz)
        inp = CampaignInput(
            campaign_id=f"sim-{uuid.uuid4().hex[:8]}",
            definition=definition,
            trunk_id=f"ST_sim_{uuid.uuid4().hex[:6]}",
            limits=Limits(max_concurrent=max_concurrent, cps=cps, max_attempts=max_attempts),
            windows=windows,
            retry=retries,
            time_scale=time_scale,
        )
    except (ContactsError, RuleError) as exc:
        raise fail(str(exc), 2) from None
    except ValidationError as exc:
        raise fail(
            "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors()), 2
        ) from None
    check_redis(settings)
    progress = Progress(len(people), "contacts done", quiet=json_out)

    def done_so_far(states: dict[str, int]) -> None:
        final = {k: n for k, n in sorted(states.items()) if k in FINAL}
        detail = ", ".join(f"{k} {n}" for k, n in final.items())
        progress.update(sum(final.values()), f"contacts done ({detail})" if detail else "contacts done")

    # On a server that outlives the command, the contacts go where `campaign status` and
    # `campaign report` read them (RINGFLOW_DATABASE_URL); an embedded one takes its own along.
    out = run_async(
        lambda: simulate_campaign(
            inp,
            people,
            weights,
            seed=seed,
            redis_url=settings.redis_url or "",
            address=address,
            database_url=settings.database_url if address is not None else None,
            on_progress=done_so_far,
        )
    )
    progress.done()
    out.pop("dial_times", None)
    if json_out:
        typer.echo(json.dumps(out))
        return
    typer.echo(
        f"campaign {out['campaign_id']}: {out['status']} · {out['contacts']} contacts · "
        f"{out['dials']} dials in {out['wall_s']} s"
    )
    typer.echo(f"  contacts: {out['contact_states']}")
    typer.echo(f"  attempts: {out['attempt_outcomes']}")
    typer.echo(
        f"  double dials {out['double_dials']} · out of window {out['out_of_window']} · "
        f"max concurrent {out['max_concurrent_seen']}/{out['max_concurrent']}"
    )
