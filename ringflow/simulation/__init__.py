"""Ringflow's simulator: whole calls with no audio, no API keys, no LiveKit server.

What ``ringflow call simulate`` and ``ringflow campaign simulate`` run, and what tests and
benchmarks build on, as ``temporalio.testing`` is for Temporal: a real ``CallWorkflow`` on
a Temporal server (an embedded one by default), the real agent code in text mode, and only
the network boundaries faked (a scripted OpenAI-compatible LLM, a protocol-level LiveKit
fake). The simulator reaches the agent through one seam, ``agents.hooks.AgentHooks``
(kill points, refused calls); production code carries none of it, and the worker and agent
images do not ship this package (``.dockerignore``).

The public face (each name imported on first use, so ``ringflow.simulation.scripted_llm``
alone stays light):

* :func:`simulate`, :class:`SimulationResult`: run conversation scripts as calls;
* :func:`environment`, :func:`run_script`: the same, one script at a time in a stack you hold;
* :func:`load_script`, :class:`ScriptError`: the script format (``docs`` in ``scripts.py``);
* :class:`ScriptedLLM`: the scripted LLM endpoint; :class:`FakeLiveKit`: the LiveKit fake;
* :class:`Killed`, :func:`kill_hooks`: kill an agent at a point, as a crash would;
* :func:`simulate_campaign`: a campaign with simulated answers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ringflow.simulation.campaign import simulate_campaign
    from ringflow.simulation.kill_points import Killed, kill_hooks
    from ringflow.simulation.livekit_fake import FakeLiveKit
    from ringflow.simulation.scripted_llm import ScriptedLLM
    from ringflow.simulation.scripts import ScriptError, load_script
    from ringflow.simulation.simulator import SimulationResult, environment, run_script, simulate

_HOMES = {
    "simulate": "simulator",
    "SimulationResult": "simulator",
    "environment": "simulator",
    "run_script": "simulator",
    "load_script": "scripts",
    "ScriptError": "scripts",
    "ScriptedLLM": "scripted_llm",
    "FakeLiveKit": "livekit_fake",
    "Killed": "kill_points",
    "kill_hooks": "kill_points",
    "simulate_campaign": "campaign",
}
__all__ = [
    "FakeLiveKit",
    "Killed",
    "ScriptError",
    "ScriptedLLM",
    "SimulationResult",
    "environment",
    "kill_hooks",
    "load_script",
    "run_script",
    "simulate",
    "simulate_campaign",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'ringflow.simulation' has no attribute {name!r}")
    return getattr(importlib.import_module(f"ringflow.simulation.{home}"), name)
