"""The state of one call: everything the engine needs to decide the next step.

One serialisable model, so the workflow can carry it across continue-as-new and the
agent can receive it on attach, and both run the engine from the same place.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ringflow.callflow.end_reasons import END_REASONS, EndReason

__all__ = ["END_REASONS", "CallState", "EndReason", "PendingRun"]


class PendingRun(BaseModel):
    """A function the engine asked to run and whose result it is waiting for."""

    model_config = ConfigDict(frozen=True)

    run_id: int
    name: str
    node: str
    args: dict[str, Any] = {}
    # tool: the LLM called it; action_node: routes on the result; side_effect: an action
    purpose: Literal["tool", "action_node", "side_effect"] = "tool"


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
    caller_number: str | None = None
    called_number: str | None = None
    started_at: float | None = None
    now: float | None = None

    def values(self) -> dict[str, Any]:
        """What templates and gate conditions see: inputs, extracted values and state."""
        return {**self.variables, **self.extracted, "state": self.state}
