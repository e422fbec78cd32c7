"""``ringflow codec-server`` and ``ringflow codec-key``: reading encrypted calls, making keys."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import signal
import socket
from datetime import UTC, datetime

import typer

from ringflow.codec import KEY_ID_RE, CodecKeyError, EncryptionCodec, generate_key, keyring_from_settings
from ringflow.logs import configure_logging
from ringflow.servers.codec import build_app, start
from ringflow.servers.codec_auth import OidcVerifier
from ringflow.settings import Settings, get_settings


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        return False


def _oidc(settings: Settings) -> OidcVerifier | None:
    if not (settings.codec_oidc_issuer and settings.codec_oidc_audience):
        return None
    return OidcVerifier(
        issuer=settings.codec_oidc_issuer,
        audience=settings.codec_oidc_audience,
        jwks_url=settings.codec_oidc_jwks_url,
        group=settings.codec_oidc_group,
        groups_claim=settings.codec_oidc_groups_claim,
    )


def codec_server(
    host: str | None = typer.Option(None, "--host", help="Bind address (RINGFLOW_CODEC_SERVER_HOST)."),
    port: int | None = typer.Option(None, "--port", help="Port (default RINGFLOW_CODEC_SERVER_PORT, 8234)."),
    no_auth: bool = typer.Option(False, "--no-auth", help="Serve without a bearer token (loopback only)."),
) -> None:
    """Decode call payloads for the Temporal UI and CLI (Temporal's Codec Server protocol)."""
    settings = get_settings()
    host = host or settings.codec_server_host
    port = settings.codec_server_port if port is None else port
    token = settings.codec_server_token.get_secret_value() if settings.codec_server_token else None
    if settings.codec_oidc_issuer and not settings.codec_oidc_audience:
        typer.echo(
            "error: RINGFLOW_CODEC_OIDC_ISSUER needs RINGFLOW_CODEC_OIDC_AUDIENCE (the UI's client id)",
            err=True,
        )
        raise typer.Exit(2)
    oidc = _oidc(settings)
    if not token and oidc is None and not no_auth:
        typer.echo(
            "error: set RINGFLOW_CODEC_SERVER_TOKEN (clients send `Authorization: Bearer <token>`) "
            "and/or RINGFLOW_CODEC_OIDC_ISSUER and _AUDIENCE (the Temporal UI's users), "
            "or pass --no-auth on a loopback address",
            err=True,
        )
        raise typer.Exit(2)
    if no_auth and not _loopback(host):
        typer.echo(f"error: --no-auth only on a loopback address, not {host}", err=True)
        raise typer.Exit(2)
    try:
        ring = keyring_from_settings(settings)
    except CodecKeyError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    if ring is None:
        typer.echo("error: no payload keys: set RINGFLOW_CODEC_KEYS or RINGFLOW_CODEC_KEY_FILE", err=True)
        raise typer.Exit(2)
    configure_logging(settings.log_level, settings.log_format)
    origins = settings.codec_cors_origins.split(",")
    app = build_app(
        EncryptionCodec(ring, compress=settings.payload_compression),
        token=None if no_auth else token,
        cors_origins=origins,
        oidc=None if no_auth else oidc,
    )

    async def serve() -> None:
        try:
            runner = await start(app, host, port)
        except OSError as err:
            typer.echo(
                f"error: cannot serve on {host}:{port} ({err.strerror or err}): pass --port or set "
                "RINGFLOW_CODEC_SERVER_PORT to a free port",
                err=True,
            )
            raise typer.Exit(2) from None
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        typer.echo(
            f"codec server on http://{host}:{port} (keys: {', '.join(ring.keys)}; "
            f"primary {ring.primary}); CORS for {', '.join(origins)}",
            err=True,
        )
        await stop.wait()
        await runner.cleanup()

    asyncio.run(serve())


def codec_key(
    key_id: str | None = typer.Option(None, "--id", help="Key id (default: k<today>)."),
    json_out: bool = typer.Option(False, "--json", help='Print {"id": ..., "entry": "id:base64"}.'),
) -> None:
    """Print a new AES-256 key entry (id:base64) to put in front of RINGFLOW_CODEC_KEYS."""
    key_id = key_id or datetime.now(UTC).strftime("k%Y%m%d")
    if not KEY_ID_RE.match(key_id):
        typer.echo("error: --id takes letters, digits, '.', '_' or '-' (at most 64)", err=True)
        raise typer.Exit(2)
    entry = f"{key_id}:{generate_key()}"
    typer.echo(json.dumps({"id": key_id, "entry": entry}) if json_out else entry)
