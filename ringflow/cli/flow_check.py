"""``ringflow flow check FILE (--against-calls QUERY | --last N --flow NAME) [--json]``: a new
version against the ended calls it will meet.

Each selected call's engine inputs (read back by replaying its history, ``ringflow/flow_check.py``)
run through the new version; for each call it says whether the path, the refused calls, the
gates' choices and the disposition stay the same, and the first step where they part.
With ``--llm`` each call's caller turns are also said again to the new version with the
model the settings name deciding (``ringflow/simulation/llm_replay.py``), and the differences
in path and disposition are reported beside the engine's.
Exit codes (a CI gate): 0 no call would change, 1 some would (or, with ``--llm``, a replay
could not run), 2 wrong usage, a flow or a reference that names nothing, or Temporal
unreachable.
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
    from ringflow.simulation.llm_replay import LlmReplay


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


def _llm_line(r: LlmReplay) -> str:
    if r.error is not None:
        return f"{r.call_id}: with the model: NOT REPLAYED: {r.error}"
    if not r.changed:
        return f"{r.call_id}: with the model: same ({r.caller_turns} caller turns)"
    return (
        f"{r.call_id}: with the model: CHANGED: recorded {' > '.join(r.recorded_path)} -> "
        f"{r.recorded_disposition}; new {' > '.join(r.new_path)} -> {r.new_disposition}"
    )


def check(
    flow: str = typer.Argument(..., help="The new version: a flow file, NAME@VERSION or NAME@CHANNEL."),
    against_calls: str | None = typer.Option(
        None, "--against-calls", help="A visibility query selecting ended calls (RingflowFlow = 'x' AND ...)."
    ),
    last: int | None = typer.Option(None, "--last", help="The newest N ended calls of --flow."),
    flow_name: str | None = typer.Option(None, "--flow", help="With --last: the flow name."),
    json_out: bool = typer.Option(False, "--json", help="One JSON document (for CI)."),
    llm: bool = typer.Option(
        False,
        "--llm",
        help="Also say each call's caller turns again to FLOW (a file) with the model the settings "
        "name deciding (OPENAI_BASE_URL, OPENAI_API_KEY, RINGFLOW_LLM_MODEL), in a simulator of its own.",
    ),
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
    settings = get_settings()
    if llm and not Path(flow).is_file():
        raise fail("--llm: FLOW must be a flow file (the simulator loads it with its handlers)", 2)
    if llm and not settings.openai_api_key:
        raise fail("--llm needs OPENAI_API_KEY (and OPENAI_BASE_URL for a server other than OpenAI's)", 2)
    new = _new_version(flow)

    async def go() -> tuple[list[CallCheck], list[str]]:
        from temporalio.service import RPCError

        client = await temporal_client(settings)
        try:
            return await check_calls(client, new, query, last or 1000)
        except RPCError as exc:
            raise fail(f"the visibility query was refused: {exc.message}", 2) from None

    checks, problems = run_async(go)
    totals = summary(checks)
    replays: list[LlmReplay] = []
    if llm:
        from ringflow.simulation.llm_replay import replay_calls

        ids = [c.call_id for c in checks]

        async def again() -> list[LlmReplay]:
            return await replay_calls(Path(flow), ids, settings.database_url)

        replays = run_async(again)
    llm_changed = sum(1 for r in replays if r.changed)
    llm_failed = sum(1 for r in replays if r.error is not None)
    if json_out:
        typer.echo(
            json.dumps(
                {
                    "flow": new.flow.flow,
                    "query": query,
                    **totals,
                    "unreadable": problems,
                    "calls": [c.model_dump(mode="json") for c in checks],
                    **(
                        {
                            "llm": {
                                "checked": len(replays),
                                "changed": llm_changed,
                                "not_replayed": llm_failed,
                                "calls": [r.model_dump(mode="json") for r in replays],
                            }
                        }
                        if llm
                        else {}
                    ),
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
        if llm:
            for r in replays:
                typer.echo(_llm_line(r))
            failed = f", {llm_failed} could not be replayed" if llm_failed else ""
            typer.echo(f"with the model: {llm_changed} of {len(replays)} calls would change{failed}")
    if totals["changed"] or llm_changed or llm_failed:
        raise typer.Exit(1)
