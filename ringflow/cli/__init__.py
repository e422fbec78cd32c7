"""The ``ringflow`` command: one Typer app, one sub-app per concern, each imported only
when it runs.

The whole stack (Temporal's SDK, LiveKit, the workflows and activities) takes seconds of
CPU to import, and most commands need a fraction of it: ``ringflow --help`` lists the
commands from :data:`COMMANDS` (names and one-line help) without importing any of them,
and a command's module is imported when the command is dispatched, its heavy imports in
its body. ``bench/cli.py`` measures the start-up; ``tests/ringflow/test_cli_startup.py``
checks that the listing matches the commands and that ``--help`` imports no SDK.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, NamedTuple

import typer
from typer.core import TyperCommand, TyperGroup

# typer vendors its own click under a private name (typer._click), whose Context and Command
# its methods take: the overrides below type them as Any rather than import that module.


class Lazy(NamedTuple):
    module: str  # where the command lives
    attr: str  # a Typer sub-app, or a command function
    help: str  # what ``ringflow --help`` shows (checked against the command's own)
    also: tuple[tuple[str, str, str], ...] = ()  # (module, function, name) mounted on a sub-app


COMMANDS: dict[str, Lazy] = {
    "flow": Lazy("ringflow.cli.flow", "flow_app", "Validate, inspect and import conversation flows."),
    "call": Lazy(
        "ringflow.cli.call",
        "call_app",
        "Start, list, inspect and hang up calls.",
        also=(
            ("ringflow.cli.sip", "dial", "dial"),
            ("ringflow.cli.supervise", "listen", "listen"),
            ("ringflow.cli.supervise", "whisper", "whisper"),
            ("ringflow.cli.supervise", "takeover", "takeover"),
            ("ringflow.cli.supervise", "handback", "handback"),
        ),
    ),
    "temporal": Lazy("ringflow.cli.ops", "temporal_app", "Prepare a Temporal server for Ringflow."),
    "sip": Lazy("ringflow.cli.sip", "sip_app", "Inbound numbers on LiveKit SIP: trunks and dispatch rules."),
    "campaign": Lazy(
        "ringflow.cli.campaign",
        "campaign_app",
        "Outbound campaigns: many calls, paced, in calling windows, retried.",
    ),
    "journey": Lazy(
        "ringflow.cli.journey",
        "journey_app",
        "Journeys: one person's calls of one flow, with follow-ups and callbacks.",
    ),
    "kb": Lazy("ringflow.cli.kb", "kb_app", "Knowledge bases: ingest a flow's documents, search them."),
    "dev": Lazy(
        "ringflow.cli.ops",
        "dev",
        "Run a local Temporal server (SQLite, survives restarts) and a Ringflow worker.",
    ),
    "config": Lazy(
        "ringflow.cli.ops",
        "config",
        "Show the effective configuration (environment and defaults), secrets masked.",
    ),
    "worker": Lazy(
        "ringflow.cli.call",
        "worker",
        "Run a Ringflow worker (CallWorkflow and its activities) with Prometheus metrics.",
    ),
    "agent": Lazy(
        "ringflow.cli.call",
        "agent",
        "Run the LiveKit agent worker (headless start mode, explicit dispatch by agent name).",
    ),
    "webhooks": Lazy(
        "ringflow.cli.sip",
        "webhooks",
        "Receive LiveKit's webhooks (POST /livekit/webhook) and relay them to the calls' workflows: "
        "a lost agent is replaced at once, a caller who hangs up ends the call.",
    ),
    "api": Lazy(
        "ringflow.cli.api",
        "api",
        "Serve the HTTP API (/v1, OpenAPI at /openapi.json) and the console (/console/).",
    ),
    "api-key": Lazy(
        "ringflow.cli.api", "api_key_app", "API keys of `ringflow api`: create (shown once), list, revoke."
    ),
    "codec-server": Lazy(
        "ringflow.cli.codec",
        "codec_server",
        "Decode call payloads for the Temporal UI and CLI (Temporal's Codec Server protocol).",
    ),
    "codec-key": Lazy(
        "ringflow.cli.codec",
        "codec_key",
        "Print a new AES-256 key entry (id:base64) to put in front of RINGFLOW_CODEC_KEYS.",
    ),
}


def load(name: str) -> Any:
    """The real command ``name``, its module imported now."""
    entry = COMMANDS[name]
    target = getattr(importlib.import_module(entry.module), entry.attr)
    if isinstance(target, typer.Typer):
        for module, fn, sub in entry.also:
            target.command(sub)(getattr(importlib.import_module(module), fn))
        command: Any = typer.main.get_group(target)  # a group even with one command
    else:
        single = typer.Typer()
        single.command(name)(target)
        command = typer.main.get_command(single)
    command.name = name
    # built as an app of its own, it got the completion options only the root app has
    command.params = [p for p in command.params if p.name not in ("install_completion", "show_completion")]
    return command


class LazyGroup(TyperGroup):
    """The root group: lists :data:`COMMANDS` from their help alone, imports one to run it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._loaded: dict[str, Any] = {}

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """What the listing reads: a stand-in with the command's help (nothing imported)."""
        if cmd_name in self._loaded:
            return self._loaded[cmd_name]
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        return TyperCommand(cmd_name, help=entry.help)

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        name = args[0] if args else None
        if name in COMMANDS:
            if name not in self._loaded:
                self._loaded[name] = load(name)
            return name, self._loaded[name], args[1:]
        return super().resolve_command(ctx, args)


app = typer.Typer(
    name="ringflow",
    help="Ringflow: durable AI phone calls. Every call is a Temporal workflow.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=LazyGroup,
)


@app.callback()
def _root() -> None:
    """Ringflow: durable AI phone calls. Every call is a Temporal workflow."""
    from ringflow.env_file import EnvFileError, load_env_file

    try:
        load_env_file()  # .env in the working directory (RINGFLOW_ENV_FILE): the shell's variables win
    except EnvFileError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None


def main() -> None:
    """The ``ringflow`` script. A broken Temporal client config (profile file, ``TEMPORAL_*``)
    surfaces wherever settings are first read, and a payload that no configured key opens
    wherever one is decoded (a query's answer, a call's result): each is one clear line,
    not a traceback."""
    from ringflow.temporal_env import TemporalConfigError

    try:
        app()
    except TemporalConfigError as err:
        typer.echo(f"error: {err}", err=True)
        raise SystemExit(2) from None
    except Exception as err:
        codec = sys.modules.get("ringflow.codec")  # not imported: the error is not a key's
        if codec is None or not isinstance(err, codec.CodecKeyError):
            raise
        typer.echo(f"error: {err}", err=True)
        raise SystemExit(1) from None


def entry_point() -> None:
    """The ``ringflow`` script and ``python -m ringflow.cli``: ``main()``, then an exit that
    cannot abort.

    The Temporal SDK's Tokio threads live until the process ends (its bridge runtime is
    global), and one that completes a Python future while the interpreter finalizes kills
    the process with SIGABRT, ``Fatal Python error: PyGILState_Release``
    (temporalio/sdk-python#300, open upstream): a worker that had shut down gracefully
    exited 134 about once in a dozen stops on a loaded machine. Once the command is done, a
    process that loaded the SDK therefore runs its exit handlers (log and span flushing,
    child processes), flushes its streams and leaves without finalizing. ``main()`` stays a
    plain function for callers in the same interpreter.
    """
    from ringflow.cli.run import exit_now

    try:
        main()
    except SystemExit as done:
        code = done.code
    else:
        code = 0
    if "temporalio" not in sys.modules:  # no Tokio threads: the usual exit
        raise SystemExit(code)
    exit_now(code)
