"""The ``ringflow`` command: one Typer app, one sub-app per concern."""

from __future__ import annotations

import typer

from ringflow.cli_call import agent, call_app, worker
from ringflow.cli_campaign import campaign_app
from ringflow.cli_codec import codec_key, codec_server
from ringflow.cli_flow import flow_app
from ringflow.cli_ops import config, dev, temporal_app
from ringflow.cli_sip import dial, sip_app, webhooks
from ringflow.temporal_env import TemporalConfigError

app = typer.Typer(
    name="ringflow",
    help="Ringflow: durable AI phone calls. Every call is a Temporal workflow.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(flow_app, name="flow")
call_app.command("dial")(dial)
app.add_typer(call_app, name="call")
app.add_typer(temporal_app, name="temporal")
app.add_typer(sip_app, name="sip")
app.add_typer(campaign_app, name="campaign")
app.command("dev")(dev)
app.command("config")(config)
app.command("worker")(worker)
app.command("agent")(agent)
app.command("webhooks")(webhooks)
app.command("codec-server")(codec_server)
app.command("codec-key")(codec_key)


def main() -> None:
    """The ``ringflow`` script. A broken Temporal client config (profile file, ``TEMPORAL_*``)
    surfaces wherever settings are first read; it is one clear line, not a traceback."""
    try:
        app()
    except TemporalConfigError as err:
        typer.echo(f"error: {err}", err=True)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
