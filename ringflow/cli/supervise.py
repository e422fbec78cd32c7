"""``ringflow call listen CALL_ID``: a supervisor's token to listen in on a live call,
hidden and subscribe-only (``agents/supervisor_listen.py``)."""

from __future__ import annotations

import asyncio
import json
import uuid

import typer

from ringflow.cli.run import run_async
from ringflow.cli.temporal import fail, temporal_client
from ringflow.contract.ids import CALL_WORKFLOW_PREFIX


def listen(
    call_id: str = typer.Argument(..., help="The call id (or its workflow id call-<id>)."),
    identity: str | None = typer.Option(None, "--identity", help="The supervisor's participant identity."),
    ttl: float = typer.Option(3600, "--ttl", help="Seconds the token is valid (at most 4 hours)."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """A LiveKit token to listen to a live call unseen: the caller is not told, the bot's
    audio goes on, the supervisor cannot be heard. Join with any LiveKit client (the URL and
    token printed)."""
    from temporalio.service import RPCError

    from ringflow.agents.supervisor_listen import listen_token
    from ringflow.settings import get_settings
    from ringflow.workflows.client import CallHandle

    settings = get_settings()
    if not (settings.livekit_url and settings.livekit_api_key and settings.livekit_api_secret):
        raise fail("listening needs LiveKit: set LIVEKIT_URL, LIVEKIT_API_KEY and LIVEKIT_API_SECRET", 2)
    call_id = call_id.removeprefix(CALL_WORKFLOW_PREFIX)
    who = identity or f"supervisor-{uuid.uuid4().hex[:8]}"

    async def go() -> str:
        client = await temporal_client(settings)
        try:
            view = await asyncio.wait_for(CallHandle(client, call_id).state(), 15)
        except RPCError as exc:
            raise fail(f"call {call_id}: {exc.message}") from None
        except TimeoutError:
            raise fail(f"call {call_id}: no worker answered (is `ringflow worker` running?)") from None
        if view.status == "ended":
            raise fail(f"call {call_id} has ended: there is nothing to listen to")
        return view.room or call_id

    room = run_async(go)
    secret = settings.livekit_api_secret
    assert secret is not None and settings.livekit_api_key is not None
    try:
        token = listen_token(settings.livekit_api_key, secret.get_secret_value(), room, who, ttl)
    except ValueError as exc:
        raise fail(f"--ttl: {exc}", 2) from None
    out = {"call_id": call_id, "room": room, "identity": who, "url": settings.livekit_url, "token": token}
    if json_out:
        typer.echo(json.dumps(out))
        return
    typer.echo(f"room      {room}\nidentity  {who}\nurl       {settings.livekit_url}\ntoken     {token}")
