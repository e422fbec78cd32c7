"""``ringflow flow publish|versions|show|diff|promote``: published, content-addressed versions.

A flow reference is a file (published on the fly), ``NAME`` (its ``production`` channel, else
its newest version), ``NAME@VERSION`` or ``NAME@CHANNEL``. Versions and channels live in the
database (``RINGFLOW_DATABASE_URL``) the workers read them from. Exit codes: 0 done, 1 an
invalid flow, 2 a reference that names nothing or wrong usage.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ringflow.cli.temporal import fail

if TYPE_CHECKING:
    from ringflow.activities.flow_store import PublishedVersion
    from ringflow.callflow.model import FlowDefinition


def is_file_ref(ref: str) -> bool:
    """A file path rather than a name (``activities.flow_store.is_file_ref``)."""
    from ringflow.activities.flow_store import is_file_ref as file_ref

    return file_ref(ref)


def load_ref(
    ref: str, database_url: str, name: str | None = None, call_id: str | None = None
) -> tuple[FlowDefinition, PublishedVersion]:
    """The definition and published version a reference names; a file is published first.
    With ``call_id`` (a new call), a channel with a running canary sends the call to the
    candidate or the baseline (``activities.flow_canaries.resolve_call``)."""
    from ringflow.activities.flow_canaries import definition_for
    from ringflow.activities.flow_store import FlowRefError, publish_file
    from ringflow.callflow.errors import FlowError

    try:
        if is_file_ref(ref):
            return publish_file(database_url, Path(ref), name)
        return definition_for(database_url, ref, call_id)
    except FileNotFoundError as exc:
        raise fail(str(exc), 2) from None
    except FlowError as exc:
        for e in exc.errors:
            typer.echo(f"{ref}: error: {e}", err=True)
        raise typer.Exit(1) from None
    except FlowRefError as exc:
        raise fail(str(exc), 2) from None


def _db() -> str:
    from ringflow.settings import get_settings

    return get_settings().database_url


def _row(v: PublishedVersion) -> dict[str, Any]:
    return {
        "name": v.name,
        "version": v.version,
        "ref": f"{v.name}@{v.version}",
        "flow_version": v.flow_version,
        "handlers": v.handlers,
        "channels": v.channels,
        "published_at": v.published_at,
    }


def publish(
    file: Path = typer.Argument(..., help="Flow file (YAML or JSON)."),
    name: str | None = typer.Option(None, "--name", help="Publish under this name (default: the flow's)."),
    json_out: bool = typer.Option(False, "--json", help="Print the version as JSON."),
) -> None:
    """Store FILE as an immutable version (handler module hashes included) and print its id;
    the same content gives the same id."""
    _, v = load_ref(str(file), _db(), name)
    if json_out:
        typer.echo(json.dumps(_row(v)))
        return
    typer.echo(f"published {v.name}@{v.version}")
    typer.echo(v.version)


def versions(
    name: str = typer.Argument(..., help="Flow name."),
    json_out: bool = typer.Option(False, "--json", help="One JSON array."),
) -> None:
    """The published versions of NAME, newest first, with the channels serving each."""
    from ringflow.activities.flow_store import list_versions

    found = list_versions(_db(), name)
    if not found:
        raise fail(f"no version of flow '{name[:100]}' is published (`ringflow flow publish FILE`)", 2)
    if json_out:
        typer.echo(json.dumps([_row(v) for v in found]))
        return
    for v in found:
        chans = f"  [{', '.join(v.channels)}]" if v.channels else ""
        typer.echo(f"{v.name}@{v.version}  v{v.flow_version}{chans}")


def show_ref(ref: str, json_out: bool) -> None:
    """``flow show`` of a published version (``NAME@VERSION``, ``NAME@CHANNEL``, ``NAME``)."""
    from ringflow.callflow.render import show

    definition, v = load_ref(ref, _db())
    if json_out:
        typer.echo(json.dumps({**_row(v), "definition": definition.model_dump(mode="json")}))
        return
    typer.echo(f"{v.name}@{v.version}" + (f"  [{', '.join(v.channels)}]" if v.channels else ""))
    typer.echo(show(definition.flow))


def diff(
    old: str = typer.Argument(..., help="A flow reference: file, NAME, NAME@VERSION or NAME@CHANNEL."),
    new: str = typer.Argument(..., help="The other flow reference."),
    json_out: bool = typer.Option(False, "--json", help="The changes as JSON."),
) -> None:
    """Nodes, functions, prompts and settings changed from OLD to NEW."""
    from ringflow.callflow.diff import diff_lines, flow_diff

    db = _db()
    a, va = load_ref(old, db)
    b, vb = load_ref(new, db)
    changes = flow_diff(a.flow, b.flow)
    if json_out:
        typer.echo(
            json.dumps({"old": f"{va.name}@{va.version}", "new": f"{vb.name}@{vb.version}", **changes})
        )
        return
    typer.echo(f"{va.name}@{va.version} -> {vb.name}@{vb.version}")
    for line in diff_lines(changes):
        typer.echo(line)


def promote(
    ref: str = typer.Argument(..., help="NAME@VERSION to promote."),
    channel: str = typer.Option(
        ..., "--channel", help="The channel to point at it (production, canary, ...)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Point CHANNEL of the flow at VERSION; calls already running keep the version they started with."""
    from ringflow.activities.flow_store import FlowRefError, channels, resolve
    from ringflow.activities.flow_store import promote as move

    db = _db()
    if is_file_ref(ref) or "@" not in ref:
        raise fail("promote takes NAME@VERSION (see `ringflow flow versions NAME`)", 2)
    try:
        v = resolve(db, ref)
        before = channels(db, v.name).get(channel)
        move(db, v.name, v.version, channel)
    except FlowRefError as exc:
        raise fail(str(exc), 2) from None
    if json_out:
        typer.echo(json.dumps({"name": v.name, "channel": channel, "version": v.version, "previous": before}))
        return
    typer.echo(f"{v.name}@{channel} -> {v.version}" + (f" (was {before})" if before else ""))
