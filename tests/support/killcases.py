"""What a call killed and resumed must equal: the uninterrupted run's outcome, compared field
by field, each run with its flow's handler module imported anew."""

from __future__ import annotations

import sys
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
