"""The demo call ``make run`` plays: a scripted call on the embedded stack, crash included.

It goes through the same simulator as ``ringflow call simulate``, against the running dev
server, so the call stays in the Temporal UI for the user to inspect afterwards.
"""

from __future__ import annotations

import logging
from pathlib import Path

import typer
from temporalio.converter import PayloadCodec
from temporalio.runtime import Runtime

from ringflow.simulation.simulator import SimulationResult, simulate


async def run_demo(
    address: str,
    ui_address: str,
    namespace: str,
    script: Path,
    kill_at: int | None,
    runtime: Runtime | None = None,
    codec: PayloadCodec | None = None,
) -> SimulationResult:
    """``runtime``: the dev worker's metrics runtime, so the demo's calls show in its metrics;
    ``codec``: the dev stack's payload encryption."""
    logging.getLogger("livekit").setLevel(logging.CRITICAL)  # the simulated crash is not an error
    crash = f" (the agent is killed during turn {kill_at})" if kill_at is not None else ""
    typer.echo(f"\nDemo call: {script}{crash}")
    [result] = await simulate([script], address=address, kill_at=kill_at, runtime=runtime, codec=codec)
    typer.echo("Transcript:")
    for t in result.transcript:
        typer.echo(f"  [{t.get('node')}] {t['role']:>9}: {t['text']}")
    typer.echo(f"Path         {' -> '.join(result.path)}")
    typer.echo(f"Disposition  {result.disposition} ({result.end_reason})")
    if result.kills:
        typer.echo(
            f"Crash        the agent was killed mid-call {result.kills}x; a new one attached "
            "and the call carried on"
        )
    if result.error is not None:
        typer.echo(f"Error        {result.error}")
    typer.echo(f"Expectations {'met' if result.ok else 'NOT met: ' + '; '.join(result.failures)}")
    typer.echo(f"Inspect      ringflow call show {result.call_id}")
    typer.echo(f"Temporal UI  {ui_address}/namespaces/{namespace}/workflows/{result.workflow_id}")
    return result
