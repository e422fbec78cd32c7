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


def whisper(
    call_id: str = typer.Argument(..., help="The call id (or its workflow id call-<id>)."),
    text: str = typer.Argument(..., help="The hint for the bot's next turn (the caller never hears it)."),
    by: str | None = typer.Option(None, "--by", help="Who whispers (kept with the call)."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Coach the bot: a hint into its LLM context for its next turn, never said to the caller."""
    _act(call_id, "whisper", json_out, text=text, by=by)


def takeover(
    call_id: str = typer.Argument(..., help="The call id (or its workflow id call-<id>)."),
    by: str | None = typer.Option(None, "--by", help="Who takes the call over (kept with the call)."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Take the call over: the bot stops speaking and listening, the flow's timers pause, and
    the call shows as RingflowStatus=takeover until `ringflow call handback`."""
    _act(call_id, "takeover", json_out, by=by)


def handback(
    call_id: str = typer.Argument(..., help="The call id (or its workflow id call-<id>)."),
    node: str | None = typer.Option(
        None, "--node", help="The agent or end node the bot resumes at (default: where it was)."
    ),
    by: str | None = typer.Option(None, "--by", help="Who hands the call back (kept with the call)."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Give the call back to the bot, at a node you pick or where it was, with your part of
    the conversation in its context and the flow's state as it was."""
    _act(call_id, "handback", json_out, node=node, by=by)


def _act(call_id: str, action: str, json_out: bool, **fields: str | None) -> None:
    """Send the supervisor's action to the call's workflow (the ``supervise`` update) and
    print what it recorded; a refusal is printed as the workflow said it, exit code 1."""
    from pydantic import ValidationError
    from temporalio.client import WorkflowUpdateFailedError
    from temporalio.service import RPCError

    from ringflow.contract.supervision import SupervisorAnswer, SupervisorRequest
    from ringflow.settings import get_settings
    from ringflow.workflows.client import CallHandle

    settings = get_settings()
    call_id = call_id.removeprefix(CALL_WORKFLOW_PREFIX)
    try:
        req = SupervisorRequest.model_validate({"action": action, **fields})
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise fail(f"{action}: {'.'.join(str(p) for p in first['loc'])}: {first['msg']}", 2) from None

    async def go() -> SupervisorAnswer:
        client = await temporal_client(settings)
        try:
            return await asyncio.wait_for(CallHandle(client, call_id).supervise(req), 30)
        except WorkflowUpdateFailedError as exc:
            cause = exc.cause
            raise fail(
                f"call {call_id}: {action} refused: {getattr(cause, 'message', None) or cause}"
            ) from None
        except RPCError as exc:
            raise fail(f"call {call_id}: {action} refused: {exc.message}") from None
        except TimeoutError:
            raise fail(f"call {call_id}: no worker answered (is `ringflow worker` running?)") from None

    answer = run_async(go)
    step = answer.step
    if json_out:
        out = {"call_id": call_id, **step.model_dump(mode="json"), "takeover": answer.supervision.takeover}
        typer.echo(json.dumps(out))
        return
    where = f" at {step.node}" if step.node else (" where the bot was" if action == "handback" else "")
    typer.echo(
        f"{action} {step.id} recorded on call {call_id}{where}; the call's agent applies it within a second"
    )
