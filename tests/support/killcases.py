"""What a call killed and resumed must equal: the uninterrupted run's outcome, compared field
by field, each run with its flow's handler module imported anew."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ringflow.callflow.loader import load_flow
from ringflow.simulation.scripts import load_script
from ringflow.simulation.simulator import SimulationResult

COMPARED = ("path", "state", "variables", "end_reason", "disposition")


def fresh_handlers(script: Path) -> None:
    """Forget the flow's handler module, so the next call imports it anew, as a freshly
    started worker would. The example handlers keep module-level state (ticket counters,
    a schedule); with a fresh module per call, a handler that ran twice in a killed call
    shows up as a difference from the baseline instead of hiding in a counter both share."""
    _, flow_path = load_script(script)
    module = load_flow(flow_path).flow.handlers
    if module:
        sys.modules.pop(module, None)


def outcome(result: SimulationResult) -> dict[str, Any]:
    return {k: getattr(result, k) for k in COMPARED}


def differences(got: dict[str, Any], want: dict[str, Any]) -> list[str]:
    return [f"{k}: {got[k]!r} != baseline {want[k]!r}" for k in COMPARED if got[k] != want[k]]


async def kill_in_every_turn(
    play: Callable[..., Awaitable[SimulationResult]],
    turns: int,
    base: SimulationResult,
    heard: Callable[[SimulationResult], list[str]],
) -> list[str]:
    """Play the script again with the agent killed in each of its ``turns`` (``kill_at``): what
    differs from ``base``'s outcome, and what ``heard`` finds wrong in what was said."""
    failures: list[str] = []
    for turn in range(turns):
        result = await play(kill_at=turn)
        if result.kills != 1:
            failures.append(f"kill in turn {turn}: no kill")
        failures += [f"kill in turn {turn}: {d}" for d in differences(outcome(result), outcome(base))]
        failures += [f"kill in turn {turn}: {p}" for p in heard(result)]
    return failures
