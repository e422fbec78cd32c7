"""``ringflow api`` and ``ringflow api-key ...``: the HTTP API and its keys."""

from __future__ import annotations

import json

import typer

from ringflow.cli.temporal import fail, require_keys

api_key_app = typer.Typer(
    help="API keys of `ringflow api`: create (shown once), list, revoke.", no_args_is_help=True
)


def api(
    host: str | None = typer.Option(None, "--host", help="Default RINGFLOW_API_HOST (127.0.0.1)."),
    port: int | None = typer.Option(None, "--port", help="Default RINGFLOW_API_PORT (8240)."),
) -> None:
    """Serve the HTTP API (/v1, OpenAPI at /openapi.json) and the console (/console/)."""
    from ringflow.logs import configure_logging
    from ringflow.servers.api import serve
    from ringflow.settings import get_settings

    settings = get_settings()
    require_keys(settings)
    configure_logging(settings.log_level, settings.log_format)
    use_host, use_port = host or settings.api_host, port if port is not None else settings.api_port
    typer.echo(
        f"Ringflow API on http://{use_host}:{use_port}/v1, console on http://{use_host}:{use_port}/console/"
    )
    try:
        serve(settings, use_host, use_port)
    except KeyboardInterrupt:
        pass


@api_key_app.command("create")
def create(
    scopes: str = typer.Option(..., "--scopes", help="Comma-separated, e.g. calls:write,calls:read."),
    name: str = typer.Option("", "--name", help="What the key is for (shown by `api-key list`)."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object."),
) -> None:
    """Make a key; it is printed once (only its SHA-256 is stored): the last line is the key."""
    from ringflow.api.keys import ScopeError, create_key
    from ringflow.settings import get_settings

    try:
        info, key = create_key(
            get_settings().database_url, [s.strip() for s in scopes.split(",") if s.strip()], name
        )
    except ScopeError as exc:
        raise fail(f"--scopes: {exc}", 2) from None
    if json_out:
        typer.echo(json.dumps({**info.as_dict(), "key": key}))
        return
    typer.echo(f"key {info.id} with scopes {','.join(info.scopes)}; shown once, store it now:")
    typer.echo(key)


@api_key_app.command("list")
def list_cmd(json_out: bool = typer.Option(False, "--json", help="One JSON array.")) -> None:
    """Every key's id, name, scopes and state (never the key)."""
    from ringflow.api.keys import list_keys
    from ringflow.settings import get_settings

    rows = [k.as_dict() for k in list_keys(get_settings().database_url)]
    if json_out:
        typer.echo(json.dumps(rows))
        return
    if not rows:
        typer.echo("no keys")
    for r in rows:
        state = f"revoked {r['revoked_at']}" if r["revoked_at"] else "active"
        typer.echo(f"{r['id']}  {','.join(r['scopes']):<40} {state:<10} {r['name']}")


@api_key_app.command("revoke")
def revoke(
    key_id: str = typer.Argument(..., help="The key's id (or the key itself)."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Refuse the key from the next request on, in every API process."""
    from ringflow.api.keys import revoke_key
    from ringflow.settings import get_settings

    info = revoke_key(get_settings().database_url, key_id)
    if info is None:
        raise fail(f"no API key '{key_id}'")
    typer.echo(json.dumps(info.as_dict()) if json_out else f"key {info.id} revoked")
