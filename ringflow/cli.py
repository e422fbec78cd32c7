"""The ``ringflow`` command: one Typer app, one sub-app per concern."""

from __future__ import annotations

import typer

from ringflow.cli_flow import flow_app

app = typer.Typer(
    name="ringflow",
    help="Ringflow: durable AI phone calls. Every call is a Temporal workflow.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(flow_app, name="flow")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
