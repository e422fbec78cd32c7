"""``ringflow call listen|whisper|takeover|handback CALL_ID``: supervisors on a live call. A
listen-in is a hidden, subscribe-only LiveKit token; a takeover answers a token to speak
to the caller with (``agents/supervisor_listen.py``)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import typer

from ringflow.cli.run import run_async
from ringflow.cli.temporal import fail, temporal_client
from ringflow.contract.ids import CALL_WORKFLOW_PREFIX

if TYPE_CHECKING:
    from temporalio.client import Client

    from ringflow.contract.supervision import SupervisorRequest
    from ringflow.settings import Settings
    from ringflow.supervisors import RoomGrant

T = TypeVar("T")


def listen(
    call_id: str = typer.Argument(..., help="The call id (or its workflow id call-<id>)."),
    identity: str | None = typer.Option(None, "--identity", help="The supervisor's participant identity."),
    ttl: float = typer.Option(3600, "--ttl", help="Seconds the token is valid (at most 4 hours)."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """A LiveKit token to listen to a live call unseen: the caller is not told, the bot's
    audio goes on, the supervisor cannot be heard. Join with any LiveKit client (the URL and
    token printed)."""
    from ringflow.settings import get_settings
    from ringflow.supervisors import (
        CallNotFound,
        NoLiveKit,
        NoWorkerAnswered,
        SupervisionRefused,
        check_ttl,
        listen_grant,
        require_livekit,
    )

    settings = get_settings()
    try:
        require_livekit(settings)
    except NoLiveKit as exc:
        raise fail(str(exc), 2) from None
    try:
        check_ttl(ttl)
    except ValueError as exc:
        raise fail(f"--ttl: {exc}", 2) from None
    call_id = call_id.removeprefix(CALL_WORKFLOW_PREFIX)
    who = identity or f"supervisor-{uuid.uuid4().hex[:8]}"

    async def go() -> RoomGrant:
        client = await temporal_client(settings)
        try:
            return await listen_grant(client, settings, call_id, who, ttl)
        except SupervisionRefused as exc:
            raise fail(f"call {call_id}: {exc.reason}") from None
        except (CallNotFound, NoWorkerAnswered) as exc:
            raise fail(f"call {call_id}: {exc}") from None

    grant = run_async(go)
    room = grant.room
    out = {"call_id": call_id, "room": room, "identity": who, "url": grant.url, "token": grant.token}
    if json_out:
        typer.echo(json.dumps(out))
        return
    typer.echo(f"room      {room}\nidentity  {who}\nurl       {grant.url}\ntoken     {grant.token}")


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
    identity: str | None = typer.Option(None, "--identity", help="The supervisor's participant identity."),
    ttl: float = typer.Option(3600, "--ttl", help="Seconds the token is valid (at most 4 hours)."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Take the call over: the bot stops speaking and listening, the flow's timers pause, and
    the call shows as RingflowStatus=takeover until `ringflow call handback`. With LiveKit
    set, prints a token to speak to the caller with (a microphone only; join in place of a
    listen token, with the same identity to replace that connection): what you say is kept
    in the call's transcript as the supervisor's turns."""
    from ringflow.settings import get_settings
    from ringflow.supervisors import check_ttl
    from ringflow.supervisors import takeover as take_over

    settings = get_settings()
    try:
        check_ttl(ttl)
    except ValueError as exc:
        raise fail(f"--ttl: {exc}", 2) from None
    call_id = call_id.removeprefix(CALL_WORKFLOW_PREFIX)
    req = _request("takeover", by=by)
    who = identity or f"supervisor-{uuid.uuid4().hex[:8]}"

    answer, grant = _send(
        settings, call_id, "takeover", lambda client: take_over(client, settings, call_id, req, who, ttl)
    )
    voice = grant.as_dict() if grant is not None else None
    if voice is not None:
        voice.pop("call_id")
    if json_out:
        out = {
            "call_id": call_id,
            **answer.step.model_dump(mode="json"),
            "takeover": answer.supervision.takeover,
            "voice": voice,
        }
        typer.echo(json.dumps(out))
        return
    typer.echo(
        f"takeover {answer.step.id} recorded on call {call_id}; the call's agent applies it within a second"
    )
    if grant is None:
        typer.echo("no token to speak with: set LIVEKIT_URL, LIVEKIT_API_KEY and LIVEKIT_API_SECRET")
        return
    typer.echo(
        f"speak to the caller with (a microphone only):\nroom      {grant.room}\nidentity  {grant.identity}\n"
        f"url       {grant.url}\ntoken     {grant.token}"
    )


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
    from ringflow.settings import get_settings
    from ringflow.supervisors import supervise

    settings = get_settings()
    call_id = call_id.removeprefix(CALL_WORKFLOW_PREFIX)
    req = _request(action, **fields)

    answer = _send(
        settings,
        call_id,
        action,
        lambda client: supervise(client, call_id, req, redis_url=settings.redis_url),
    )
    step = answer.step
    if json_out:
        out = {"call_id": call_id, **step.model_dump(mode="json"), "takeover": answer.supervision.takeover}
        typer.echo(json.dumps(out))
        return
    where = f" at {step.node}" if step.node else (" where the bot was" if action == "handback" else "")
    typer.echo(
        f"{action} {step.id} recorded on call {call_id}{where}; the call's agent applies it within a second"
    )


def _request(action: str, **fields: str | None) -> SupervisorRequest:
    """The action as the workflow takes it; bad fields exit with code 2 naming the field."""
    from pydantic import ValidationError

    from ringflow.contract.supervision import SupervisorRequest

    try:
        return SupervisorRequest.model_validate({"action": action, **fields})
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise fail(f"{action}: {'.'.join(str(p) for p in first['loc'])}: {first['msg']}", 2) from None


def _send(settings: Settings, call_id: str, action: str, send: Callable[[Client], Awaitable[T]]) -> T:
    """``send`` the action with a Temporal client; its refusals printed, exit code 1."""
    from ringflow.supervisors import CallNotFound, NoWorkerAnswered, SupervisionRefused

    async def go() -> T:
        client = await temporal_client(settings)
        try:
            return await send(client)
        except SupervisionRefused as exc:
            raise fail(f"call {call_id}: {exc}") from None
        except CallNotFound as exc:
            raise fail(f"call {call_id}: {action} refused: {exc}") from None
        except NoWorkerAnswered as exc:
            raise fail(str(exc)) from None

    return run_async(go)
