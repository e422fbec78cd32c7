"""``ringflow flow ...``: validate, show, graph and import flows.

Exit codes: 0 valid (warnings allowed), 1 invalid, 2 unreadable or
wrong usage. No input, however malformed, ends in a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from ringflow.callflow.errors import Issue
from ringflow.callflow.loader import ValidationReport, read_file, validate_data, validate_file
from ringflow.callflow.render import mermaid, show, table
from ringflow.cli import flow_canary, flow_check, flow_versions

flow_app = typer.Typer(help="Validate, inspect and import conversation flows.", no_args_is_help=True)


def _versions() -> Any:
    """Published versions a subflow node may use (NAME@VERSION), read only if one does: the
    store (SQLAlchemy, the activities package) is imported at the first such reference, so
    ``flow validate`` of a flow of files stays as light as ever (tests/ringflow/test_cli_startup.py)."""

    def read(ref: str) -> Any:
        from ringflow.activities.flow_store import version_source
        from ringflow.settings import get_settings

        return version_source(get_settings().database_url)(ref)

    return read


def _report_or_exit(path: Path) -> ValidationReport:
    try:
        report = validate_file(path, versions=_versions())
    except FileNotFoundError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if not report.ok:
        for e in report.errors:
            typer.echo(f"{path}: error: {e}", err=True)
        raise typer.Exit(1)
    return report


@flow_app.command()
def validate(
    files: list[Path] = typer.Argument(..., help="Flow files (YAML or JSON)."),
    json_out: bool = typer.Option(False, "--json", help="One JSON document per file."),
    mcp: bool = typer.Option(
        False,
        "--mcp",
        help="Also contact the declared MCP servers: each must "
        "answer tools/list and have the tools the flow names (off: validation "
        "stays offline).",
    ),
) -> None:
    """Check flows against the format's rules; every problem with its path and a hint.

    The flow's handlers module is imported, so its code runs here.
    Handlers are trusted code: see "Handler modules" in docs/flow-format.md.
    """
    worst = 0
    for path in files:
        try:
            report = validate_file(path, versions=_versions())
            if mcp and report.definition is not None and report.definition.flow.mcp_servers:
                import asyncio  # only here: `flow validate` without --mcp runs no loop

                from ringflow.cli.mcp_check import check_servers

                report.errors.extend(asyncio.run(check_servers(report.definition)))
        except FileNotFoundError as exc:
            if json_out:
                typer.echo(
                    json.dumps(
                        {
                            "file": str(path),
                            "valid": False,
                            "errors": [{"path": "", "message": str(exc)}],
                            "warnings": [],
                            "notes": [],
                        }
                    )
                )
            else:
                typer.echo(f"{path}: error: {exc}", err=True)
            worst = 2
            continue
        if json_out:
            typer.echo(json.dumps(report.as_dict()))
        else:
            for e in report.errors:
                typer.echo(f"{path}: error: {e}")
            for w in report.warnings:
                typer.echo(f"{path}: warning: {w}")
            for note in report.notes:
                typer.echo(f"{path}: note: {note}")
            if report.ok:
                n = len(report.warnings)
                extra = f" ({n} warning{'' if n == 1 else 's'})" if n else ""
                typer.echo(f"{path}: valid{extra}")
        if not report.ok:
            worst = max(worst, 1)
    raise typer.Exit(worst)


JSON_OUT = typer.Option(False, "--json", help="Print one JSON object.")

flow_app.command("publish")(flow_versions.publish)
flow_app.command("versions")(flow_versions.versions)
flow_app.command("diff")(flow_versions.diff)
flow_app.command("promote")(flow_versions.promote)
flow_app.command("canary")(flow_canary.canary)
flow_app.command("check")(flow_check.check)


@flow_app.command("show")
def show_cmd(
    file: str = typer.Argument(..., help="Flow file, or a published NAME@VERSION, NAME@CHANNEL or NAME."),
    json_out: bool = typer.Option(
        False, "--json", help="One JSON object: a file's table, or a published version with its definition."
    ),
) -> None:
    """A table of nodes, their functions and where each one goes."""
    if not flow_versions.is_file_ref(file):
        flow_versions.show_ref(file, json_out)
        return
    report = _report_or_exit(Path(file))
    assert report.definition is not None
    flow = report.definition.flow
    if json_out:
        doc = {"flow": flow.flow, "version": flow.version, "start": flow.start_node, "rows": table(flow)}
        typer.echo(json.dumps(doc))
        return
    typer.echo(show(flow))


@flow_app.command()
def graph(file: Path = typer.Argument(..., help="Flow file."), json_out: bool = JSON_OUT) -> None:
    """The flow as a Mermaid flowchart, on stdout."""
    report = _report_or_exit(file)
    assert report.definition is not None
    if json_out:
        typer.echo(
            json.dumps({"flow": report.definition.flow.flow, "mermaid": mermaid(report.definition.flow)})
        )
        return
    typer.echo(mermaid(report.definition.flow), nl=False)


@flow_app.command("import")
def import_cmd(
    file: Path = typer.Argument(..., help="The file to convert (JSON)."),
    source: str | None = typer.Option(
        None,
        "--from",
        help="dograh, pipecat (editor export) or pipecat-legacy (FlowConfig); "
        "pipecat-editor and pipecat-config are accepted too. Default: detected from the file.",
    ),
    out: Path | None = typer.Option(None, "-o", "--out", help="Write the YAML here (default stdout)."),
    lenient: bool = typer.Option(
        False,
        "--lenient",
        help="Import a Dograh workflow that Dograh itself would refuse to "
        "publish (an edge into the start node...), or a Pipecat Flows file whose "
        "function goes to a node that does not exist, with a warning per broken rule.",
    ),
    json_out: bool = typer.Option(
        False, "--json", help="Print one JSON object: source, flow (YAML), warnings, errors, written file."
    ),
) -> None:
    """Convert a Dograh or Pipecat Flows file to a Ringflow flow, then validate it."""
    from ringflow.callflow.importers import (
        ALIASES,
        SOURCE_NAMES,
        SOURCES,
        FlowImportError,
        detect_source,
        import_flow,
        to_yaml,
    )

    if source is not None and source not in SOURCES and source not in ALIASES:
        typer.echo(f"error: --from must be one of {', '.join((*SOURCES, *ALIASES))}", err=True)
        raise typer.Exit(2)
    data = _read_import(file)
    if source is None:
        source = detect_source(data)
        if source is None:
            typer.echo(
                f"error: {file}: not a Dograh workflow, Pipecat Flows editor export or "
                f"Pipecat Flows config that could be recognised; say which with --from "
                f"({', '.join(SOURCES)})",
                err=True,
            )
            raise typer.Exit(1)
        typer.echo(f"{file}: detected format: {SOURCE_NAMES[source]} (--from {source})", err=True)
    # A Pipecat Flows config holds no name of its own: the file's name is the flow's.
    named = file.stem if ALIASES.get(source, source) == "pipecat-legacy" else None
    try:
        result = import_flow(source, data, lenient=lenient, name=named)
    except FlowImportError as exc:
        typer.echo(f"error: {file}: {exc}", err=True)
        raise typer.Exit(1) from None
    for w in result.warnings:
        typer.echo(f"{file}: warning: {w}", err=True)  # each says what became of the part
    text = to_yaml(result.flow)
    base = out.parent if out is not None else file.parent
    report = validate_data(result.flow, base_dir=base, source=str(out or file))
    _print_issues(report.errors, "error")
    if out is not None:
        out.write_text(text, encoding="utf-8")
        typer.echo(f"wrote {out}", err=True)
    if json_out:
        doc = {
            "source": source,
            "flow": text,
            "warnings": [str(w) for w in result.warnings],
            "errors": [str(e) for e in report.errors],
            "written": str(out) if out is not None else None,
        }
        typer.echo(json.dumps(doc))
    elif out is None:
        typer.echo(text, nl=False)
    raise typer.Exit(0 if report.ok else 1)


def _read_import(file: Path) -> object:
    """The file parsed, within the loader's size limit: checked before reading it, so
    a huge file is refused at once and not converted into a flow nothing accepts."""
    try:
        data, issues = read_file(file)
    except FileNotFoundError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if issues:
        typer.echo(f"error: cannot read {file}: {issues[0].message}", err=True)
        raise typer.Exit(2)
    return data


def _print_issues(issues: list[Issue], kind: str) -> None:
    for i in issues:
        typer.echo(f"converted flow: {kind}: {i}", err=True)
