"""The state of one call: everything the engine needs to decide the next step.

One serialisable model, so the workflow can carry it across continue-as-new and the
agent can receive it on attach, and both run the engine from the same place.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ringflow.callflow.end_reasons import END_REASONS, EndReason
from ringflow.callflow.journey import JourneyContext

__all__ = [
    "END_REASONS",
    "CallState",
    "Digression",
    "EndReason",
    "PendingRun",
    "SubflowFrame",
    "Waiting",
    "extraction_node",
]


def extraction_node(extraction_id: str) -> str:
    """The node an extraction id (``<node>#<visit>``, see ``CallState.extracting``) is for."""
    return extraction_id.rsplit("#", 1)[0]


class PendingRun(BaseModel):
    """A function the engine asked to run and whose result it is waiting for."""

    model_config = ConfigDict(frozen=True)

    run_id: int
    name: str
    node: str
    args: dict[str, Any] = {}
    # tool: the LLM called it; action_node: routes on the result; side_effect: an action
    purpose: Literal["tool", "action_node", "side_effect"] = "tool"


class Waiting(BaseModel):
    """An entry the engine paused: ``node`` (a gate, an action or a node whose prompt,
    greeting, tools or actions read them) needs values an extraction still running will
    give. The extraction's result resumes it, on both sides, as if just entered from
    ``from_node``; ``speech`` is the transition's speech when it read such a value too (it
    is said on arrival, the flow's ``wait_speech`` filled the wait instead)."""

    model_config = ConfigDict(frozen=True)

    node: str
    from_node: str | None = None
    speech: str | None = None
    resuming: bool = False  # a digression's return: shown without its greeting (Draft.show_node)


class Digression(BaseModel):
    """One frame of the return stack: the call went from ``origin`` into the global node
    ``node``, whose ``go_back`` pops it and returns there (or to the node's named target)."""

    model_config = ConfigDict(frozen=True)

    node: str
    origin: str


class SubflowFrame(BaseModel):
    """One open subflow: the call entered the ``subflow`` node ``node`` and is in its nodes
    (``<node>.*``). The call's ``variables``, ``extracted`` and ``state`` are the subflow's
    own while it runs (its inputs, what its nodes extracted and captured); the frame keeps
    the calling flow's, given back with the subflow's outputs when it returns
    (``callflow/subflows.py``)."""

    model_config = ConfigDict(frozen=True)

    node: str
    variables: dict[str, Any] = {}
    extracted: dict[str, Any] = {}
    state: dict[str, Any] = {}


class CallState(BaseModel):
    """Immutable by convention: the engine returns a new one for every change."""

    call_id: str = ""
    flow: str = ""
    version: int = 1
    node: str | None = None
    path: list[str] = []
    visits: dict[str, int] = {}
    transitions: int = 0
    variables: dict[str, Any] = {}
    extracted: dict[str, Any] = {}
    state: dict[str, Any] = {}
    ended: bool = False
    end_reason: EndReason | None = None
    disposition: str | None = None
    seq: int = 0
    idle_count: int = 0
    pending: dict[str, PendingRun] = {}
    # Extractions running, ``<node>#<visit>`` each, in the order the call left the nodes:
    # both engines add one on leaving a node that extracts and drop it on its result.
    extracting: list[str] = []
    waiting: Waiting | None = None
    # Global nodes (``global:``): the open digressions, innermost last; how often each global
    # node was digressed into; the transition count its last digression ended at (cooldown).
    return_stack: list[Digression] = []
    global_uses: dict[str, int] = {}
    global_since: dict[str, int] = {}
    subflows: list[SubflowFrame] = []  # open subflows, innermost last
    caller_number: str | None = None
    called_number: str | None = None
    started_at: float | None = None
    now: float | None = None
    journey: JourneyContext | None = None  # a journey's call (callflow/journey.py)
    # Supervisors (``SupervisorAction``): a person has the call (the bot is paused), and the
    # id of the last supervisor action both engines applied.
    takeover: bool = False
    supervisor_seen: int = 0
    # The LLM's function calls the engine refused (``Engine._on_function_called``): the
    # call's record keeps the count, and a canary compares its sides by it.
    refused: int = 0

    def values(self) -> dict[str, Any]:
        """What templates and gate conditions see: inputs, extracted values and state."""
        return {**self.variables, **self.extracted, "state": self.state}
