"""``ringflow flow canary NAME@VERSION --percent N --against CHANNEL``, ``flow canary status
[NAME]`` and ``flow canary stop NAME``: a candidate version on a share of a channel's calls,
watched by a workflow that promotes it or rolls it back by itself (docs/flow-versions.md).

Exit codes: 0 done, 2 a canary that cannot start or be found, or wrong usage; 1 Temporal
unreachable.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import typer

from ringflow.cli.run import run_async
from ringflow.cli.temporal import fail, temporal_client

if TYPE_CHECKING:
    from ringflow.activities.flow_canaries import Canary
    from ringflow.contract.canary import CanaryView


def canary(
    ref: str = typer.Argument(..., help="NAME@VERSION to try; or `status` or `stop`."),
    target: str | None = typer.Argument(
        None, help="With status: a flow NAME (default: every flow's running canaries); with stop: NAME."
    ),
    percent: float | None = typer.Option(
        None, "--percent", help="Share of new calls for the candidate (0-100]."
    ),
    against: str = typer.Option("production", "--against", help="The channel it is compared with."),
    confidence: float = typer.Option(0.95, "--confidence", help="How sure the test must be, either way."),
    min_calls: int = typer.Option(100, "--min-calls", help="Ended calls per side before a promotion."),
    margin: float = typer.Option(0.05, "--margin", help="A rate may be this much worse and still pass."),
    check_every: float = typer.Option(60.0, "--check-every", help="Seconds between looks at the outcomes."),
    reason: str = typer.Option("stopped by an operator", "--reason", help="With stop: why."),
    json_out: bool = typer.Option(False, "--json", help="One JSON document."),
) -> None:
    """Send PERCENT of AGAINST's new calls to NAME@VERSION; a workflow compares both sides'
    outcomes and promotes the candidate when it is no worse, or rolls it back when it is worse."""
    if ref == "status":
        _status(target, json_out)
        return
    if ref == "stop":
        _stop(target, against, reason, json_out)
        return
    if target is not None:
        raise fail(f"unexpected argument '{target[:60]}' (usage: flow canary NAME@VERSION --percent N)", 2)
    if percent is None:
        raise fail("--percent is required: the share of new calls the candidate gets", 2)
    from pydantic import ValidationError

    from ringflow.activities.flow_canaries import CanaryError
    from ringflow.callflow.canary import CanaryPolicy
    from ringflow.settings import get_settings
    from ringflow.workflows.canary_client import start_canary

    try:
        policy = CanaryPolicy(confidence=confidence, min_calls=min_calls, margin=margin)
    except ValidationError as exc:
        raise fail(
            "; ".join(f"--{str(e['loc'][0]).replace('_', '-')}: {e['msg']}" for e in exc.errors()), 2
        ) from None
    if not 0 < check_every <= 86400:
        raise fail("--check-every: seconds, above 0 and at most 86400", 2)
    settings = get_settings()

    async def go() -> Canary:
        client = await temporal_client(settings)
        return await start_canary(
            client,
            settings.database_url,
            ref,
            percent,
            against,
            task_queue=settings.task_queue,
            policy=policy,
            check_every_s=check_every,
        )

    try:
        started = run_async(go)
    except CanaryError as exc:
        raise fail(str(exc), 2) from None
    if json_out:
        typer.echo(json.dumps({**started.model_dump(mode="json"), "workflow_id": started.workflow_id}))
        return
    typer.echo(
        f"canary {started.name}@{started.candidate} on {started.percent:g}% of "
        f"{started.name}@{started.channel} "
        f"(baseline {started.baseline}), watched by workflow {started.workflow_id}"
    )
    typer.echo(started.canary_id)


def _side(label: str, s: Any) -> str:
    mean = s.duration_sum / s.calls if s.calls else 0.0
    mix = ", ".join(f"{k} {v}" for k, v in sorted(s.dispositions.items())) or "-"
    return (
        f"  {label:9} {s.calls} ended: {s.failed} failed, {s.transferred} transferred, "
        f"{s.completed} completed, mean {mean:.1f} s; dispositions: {mix}"
    )


def _status(name: str | None, json_out: bool) -> None:
    from ringflow.activities.flow_canaries import list_canaries
    from ringflow.settings import get_settings
    from ringflow.workflows.canary_client import canary_view

    settings = get_settings()
    found = list_canaries(settings.database_url, name)
    if name is None:
        found = [c for c in found if c.state == "running"]
    if not found:
        raise fail("no canary" + (f" of flow '{name[:100]}'" if name else " is running"), 2)

    async def go() -> list[CanaryView]:
        client = await temporal_client(settings)
        return [await canary_view(client, c) for c in found]

    views = run_async(go)
    if json_out:
        typer.echo(
            json.dumps(
                [
                    {
                        **c.model_dump(mode="json"),
                        "workflow_id": c.workflow_id,
                        "watch": v.model_dump(mode="json"),
                    }
                    for c, v in zip(found, views, strict=True)
                ]
            )
        )
        return
    for c, v in zip(found, views, strict=True):
        typer.echo(
            f"{c.canary_id}: {c.name}@{c.candidate} vs {c.channel} ({c.baseline}) "
            f"at {c.percent:g}%: {v.status}"
        )
        typer.echo(_side("candidate", v.candidate_stats))
        typer.echo(_side("baseline", v.baseline_stats))
        why = c.reason or (v.verdict.reason if v.verdict is not None else "no look yet")
        typer.echo(f"  {v.checks} looks; {why}")


def _stop(name: str | None, channel: str, reason: str, json_out: bool) -> None:
    from ringflow.activities.flow_canaries import running_canary
    from ringflow.settings import get_settings
    from ringflow.workflows.canary_client import stop_canary

    if name is None:
        raise fail("stop takes the flow NAME (and --against CHANNEL, default production)", 2)
    settings = get_settings()
    found = running_canary(settings.database_url, name, channel)
    if found is None:
        raise fail(f"no canary of flow '{name[:100]}' against {channel[:40]} is running", 2)
    running = found

    async def go() -> None:
        await stop_canary(await temporal_client(settings), running, reason)

    run_async(go)
    if json_out:
        typer.echo(json.dumps({"canary_id": found.canary_id, "stopping": True, "reason": reason}))
        return
    typer.echo(f"stopping {found.canary_id}: it rolls back at once")
