"""A canary on the wire: its workflow's input, what one run hands the next, the ``stop``
signal and the ``status`` query's answer (``workflows/flow_canary.py``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ringflow.callflow.canary import CanaryPolicy, SideStats, Verdict
from ringflow.contract.wire import Answer, Message

CANARY_WORKFLOW = "FlowCanaryWorkflow"  # the name ``workflows/flow_canary.py`` registers
CanaryStatusName = Literal["running", "promoted", "rolled_back"]


class CanaryInput(Message):
    canary_id: str = Field(min_length=1, max_length=200)
    name: str
    channel: str
    candidate: str
    baseline: str
    percent: float = Field(gt=0, le=100)
    policy: CanaryPolicy = CanaryPolicy()
    check_every_s: float = Field(default=60.0, gt=0, le=86400, allow_inf_nan=False)
    checks_per_run: int = Field(default=500, ge=1)  # then it continues as new
    carry: CanaryView | None = None


class StopRequest(Message):
    """An operator's stop: the canary rolls back with this reason."""

    reason: str = Field(default="stopped by an operator", max_length=500)


class CanaryView(Answer):
    """Both sides and the decision so far (the ``status`` query; the workflow's result)."""

    canary_id: str
    name: str
    channel: str
    candidate: str
    baseline: str
    percent: float
    status: CanaryStatusName = "running"
    checks: int = 0
    candidate_stats: SideStats = SideStats()
    baseline_stats: SideStats = SideStats()
    verdict: Verdict | None = None


CanaryInput.model_rebuild()
