"""``ringflow call listen CALL_ID``: a supervisor's token to listen in on a live call,
hidden and subscribe-only (``agents/supervisor_listen.py``)."""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING

import typer

from ringflow.cli.run import run_async
from ringflow.cli.temporal import fail, temporal_client
from ringflow.contract.ids import CALL_WORKFLOW_PREFIX

if TYPE_CHECKING:
    from ringflow.supervisors import ListenGrant


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

    async def go() -> ListenGrant:
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

    from ringflow.contract.supervision import SupervisorAnswer, SupervisorRequest
    from ringflow.settings import get_settings
    from ringflow.supervisors import CallNotFound, NoWorkerAnswered, SupervisionRefused, supervise

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
            return await supervise(client, call_id, req, redis_url=settings.redis_url)
        except SupervisionRefused as exc:
            raise fail(f"call {call_id}: {exc}") from None
        except CallNotFound as exc:
            raise fail(f"call {call_id}: {action} refused: {exc}") from None
        except NoWorkerAnswered as exc:
            raise fail(str(exc)) from None

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
