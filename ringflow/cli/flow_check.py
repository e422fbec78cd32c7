"""``ringflow flow check FILE (--against-calls QUERY | --last N --flow NAME) [--json]``: a new
version against the ended calls it will meet.

Each selected call's engine inputs (read back by replaying its history, ``ringflow/flow_check.py``)
run through the new version; for each call it says whether the path, the refused calls, the
gates' choices and the disposition stay the same, and the first step where they part.
Exit codes (a CI gate): 0 no call would change, 1 some would, 2 wrong usage, a flow or a
reference that names nothing, or Temporal unreachable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ringflow.cli.run import run_async
from ringflow.cli.temporal import fail, temporal_client

if TYPE_CHECKING:
    from ringflow.callflow.check import CallCheck
    from ringflow.callflow.model import FlowDefinition


def _new_version(ref: str) -> FlowDefinition:
    """A file (loaded, not published: checking changes nothing) or a published reference."""
    from ringflow.callflow.errors import FlowError

    if Path(ref).exists() or ref.endswith((".yaml", ".yml", ".json")):
        from ringflow.callflow.loader import load_flow

        try:
            from ringflow.activities.flow_store import version_source
            from ringflow.settings import get_settings

            return load_flow(Path(ref), versions=version_source(get_settings().database_url))
        except FileNotFoundError as exc:
            raise fail(str(exc), 2) from None
        except FlowError as exc:
            for e in exc.errors:
                typer.echo(f"{ref}: error: {e}", err=True)
            raise typer.Exit(2) from None
    from ringflow.cli.flow_versions import load_ref
    from ringflow.settings import get_settings

    definition, _ = load_ref(ref, get_settings().database_url)
    return definition


def _line(c: CallCheck) -> list[str]:
    if not c.changed:
        return [f"{c.call_id}: same ({c.steps} steps, {' > '.join(c.recorded_path)})"]
    what = [
        name
        for name, same in (
            ("path", c.path_same),
            ("refused calls", c.refused_same),
            ("gate choices", c.gates_same),
            ("disposition", c.disposition_same),
        )
        if not same
    ]
    out = [f"{c.call_id}: CHANGED ({', '.join(what)})"]
    out.append(f"  recorded: {' > '.join(c.recorded_path)} -> {c.recorded_disposition}")
    out.append(f"  new:      {' > '.join(c.new_path)} -> {c.new_disposition}")
    if (p := c.first_difference) is not None:
        out.append(f"  parts at step {p.step}, {p.event}:")
        out.append(
            f"    recorded on {p.recorded.node}"
            + (f", refused: {p.recorded.refused}" if p.recorded.refused else "")
        )
        out.append(f"    new on {p.new.node}" + (f", refused: {p.new.refused}" if p.new.refused else ""))
    out += [f"  note: {n}" for n in c.notes[:5]]
    return out


def check(
    flow: str = typer.Argument(..., help="The new version: a flow file, NAME@VERSION or NAME@CHANNEL."),
    against_calls: str | None = typer.Option(
        None, "--against-calls", help="A visibility query selecting ended calls (RingflowFlow = 'x' AND ...)."
    ),
    last: int | None = typer.Option(None, "--last", help="The newest N ended calls of --flow."),
    flow_name: str | None = typer.Option(None, "--flow", help="With --last: the flow name."),
    json_out: bool = typer.Option(False, "--json", help="One JSON document (for CI)."),
) -> None:
    """Replay recorded calls' caller turns and function calls through FLOW; exit 1 when any
    call's path, refused calls, gate choices or disposition would change."""
    from ringflow.callflow.check import summary
    from ringflow.flow_check import CheckError, check_calls, selection
    from ringflow.settings import get_settings

    if (against_calls is None) == (last is None):
        raise fail("give --against-calls QUERY or --last N --flow NAME", 2)
    if last is not None and last < 1:
        raise fail("--last: at least 1", 2)
    try:
        query = selection(against_calls, last, flow_name)
    except CheckError as exc:
        raise fail(str(exc), 2) from None
    new = _new_version(flow)
    settings = get_settings()

    async def go() -> tuple[list[CallCheck], list[str]]:
        from temporalio.service import RPCError

        client = await temporal_client(settings)
        try:
            return await check_calls(client, new, query, last or 1000)
        except RPCError as exc:
            raise fail(f"the visibility query was refused: {exc.message}", 2) from None

    checks, problems = run_async(go)
    totals = summary(checks)
    if json_out:
        typer.echo(
            json.dumps(
                {
                    "flow": new.flow.flow,
                    "query": query,
                    **totals,
                    "unreadable": problems,
                    "calls": [c.model_dump(mode="json") for c in checks],
                }
            )
        )
    else:
        for c in checks:
            for line in _line(c):
                typer.echo(line)
        for p in problems:
            typer.echo(f"skipped: {p}", err=True)
        typer.echo(f"{totals['changed']} of {totals['checked']} calls would change")
    if totals["changed"]:
        raise typer.Exit(1)
