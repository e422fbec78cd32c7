"""A canary's arithmetic: which side a call falls on, and whether the candidate is worse.

Pure and deterministic, because both the resolver (which sends a new call to one side) and
the canary's workflow (which decides, and must decide the same on every replay) run it.

Assignment is a stable hash of the canary and the call's key (a call id, or a campaign's
contact), so a retried call or contact lands on the side it had, on any process.

The decision is a sequential test: the canary looks at the outcomes as often as it likes,
so a fixed-sample test would be fooled by its own repeated looks. Each metric gets an
always-valid confidence sequence for the difference between the sides (the normal-mixture
sequential probability ratio test, mSPRT: Robbins 1970, Johari et al. 2017, the test
Optimizely's stats engine runs), at level ``1 - (1 - confidence) / metrics`` (Bonferroni
over the metrics). The candidate is **rolled back** as soon as one metric's sequence lies
wholly on the worse side of zero, and **promoted** once both sides have ``min_calls`` ended
calls and every metric's sequence lies below the non-inferiority margin (no worse than the
baseline by more than ``margin``) on its worse side.
"""

from __future__ import annotations

import hashlib
import math
from typing import Literal

from pydantic import BaseModel, Field

Side = Literal["candidate", "baseline"]
Decision = Literal["continue", "promote", "rollback"]
BUCKETS = 10_000  # a percent with two decimals splits exactly

FAILED_REASONS = ("error", "agent_lost")  # the call broke, whatever the flow meant
COMPLETED_REASONS = ("completed",)  # the flow reached an end it names


def side_for(canary_id: str, key: str, percent: float) -> Side:
    """The side of the call with ``key``: the same for the same canary and key, everywhere."""
    digest = hashlib.sha256(f"{canary_id}\x00{key}".encode()).digest()
    bucket = int.from_bytes(digest[:8], "big") % BUCKETS
    return "candidate" if bucket < round(percent * BUCKETS / 100) else "baseline"


def contact_key(campaign_id: str, idx: int) -> str:
    """A campaign contact's key for :func:`side_for`: the same for every attempt of the
    contact (a call id names the attempt), so a retried contact stays on its side."""
    return f"campaign:{campaign_id}:{idx}"


class SideStats(BaseModel):
    """One side's ended calls, as sums (a canary's history holds counts, not calls)."""

    calls: int = 0
    failed: int = 0  # end reason ``error`` or ``agent_lost``
    transferred: int = 0
    completed: int = 0  # reached an end node (``completed``)
    refused: int = 0  # calls with a function call the engine refused (CallRecord.refused > 0)
    refusals: int = 0  # the function calls refused, all calls together
    duration_sum: float = 0.0  # seconds
    duration_sumsq: float = 0.0
    dispositions: dict[str, int] = {}

    def add(
        self, end_reason: str | None, disposition: str | None, duration_s: float, refused: int = 0
    ) -> SideStats:
        """These stats with one more ended call, which had ``refused`` function calls refused."""
        mix = dict(self.dispositions)
        key = disposition or "(none)"
        mix[key] = mix.get(key, 0) + 1
        return self.model_copy(
            update={
                "calls": self.calls + 1,
                "failed": self.failed + (end_reason in FAILED_REASONS),
                "transferred": self.transferred + (end_reason == "transferred"),
                "completed": self.completed + (end_reason in COMPLETED_REASONS),
                "refused": self.refused + (refused > 0),
                "refusals": self.refusals + max(refused, 0),
                "duration_sum": self.duration_sum + duration_s,
                "duration_sumsq": self.duration_sumsq + duration_s * duration_s,
                "dispositions": mix,
            }
        )


class CanaryPolicy(BaseModel):
    """How sure the canary must be, and what "no worse" allows."""

    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)
    min_calls: int = Field(default=100, ge=1)  # per side, before a promotion
    margin: float = Field(default=0.05, gt=0.0, le=1.0)  # rates: absolute difference allowed
    duration_margin: float = Field(default=0.2, gt=0.0)  # call length: relative to the baseline's mean


class MetricCheck(BaseModel):
    """One metric: both sides' values, the difference (candidate worse when positive: the
    sign is turned for metrics where higher is better), and its confidence sequence."""

    metric: str
    candidate: float
    baseline: float
    worse_by: float
    low: float
    high: float
    margin: float
    verdict: Literal["worse", "no_worse", "unsure"]


class Verdict(BaseModel):
    decision: Decision
    reason: str
    checks: list[MetricCheck] = []


def _radius(variance: float, tau2: float, alpha: float) -> float:
    """Half-width of the mSPRT confidence sequence for a mean difference whose estimate has
    ``variance``, with a normal mixture of variance ``tau2`` over the true difference."""
    if variance <= 0.0:
        return math.inf
    spread = 2 * math.log(1 / alpha) + math.log((variance + tau2) / variance)
    return math.sqrt(variance * (variance + tau2) / tau2 * spread)


def _rate(x: int, n: int) -> float:
    return x / n if n else 0.0


def _rate_variance(x: int, n: int) -> float:
    """The variance of a rate's estimate, smoothed (``(x+1)/(n+2)``) so that a side with no
    failures yet is not taken as certain to have none."""
    p = (x + 1) / (n + 2)
    return p * (1 - p) / max(n, 1)


def _mean_variance(total: float, sumsq: float, n: int) -> tuple[float, float]:
    if n < 2:
        return (total / n if n else 0.0), math.inf
    mean = total / n
    var = max(sumsq / n - mean * mean, 0.0) * n / (n - 1)
    return mean, max(var, 1e-6) / n


def _check(
    metric: str, cand: float, base: float, worse_by: float, variance: float, margin: float, alpha: float
) -> MetricCheck:
    r = _radius(variance, margin * margin, alpha)
    low, high = worse_by - r, worse_by + r
    verdict: Literal["worse", "no_worse", "unsure"] = (
        "worse" if low > 0 else "no_worse" if high < margin else "unsure"
    )
    return MetricCheck(
        metric=metric,
        candidate=round(cand, 6),
        baseline=round(base, 6),
        worse_by=round(worse_by, 6),
        low=round(low, 6) if math.isfinite(low) else -1e9,
        high=round(high, 6) if math.isfinite(high) else 1e9,
        margin=round(margin, 6),
        verdict=verdict,
    )


RATE_METRICS: tuple[tuple[str, bool], ...] = (  # (field, higher is worse)
    ("failed", True),
    ("transferred", True),
    ("refused", True),
    ("completed", False),
)


# what each metric counts, as a rollback's reason says it
METRIC_MEANS = {
    "failed_rate": "calls that broke",
    "transferred_rate": "calls transferred",
    "refused_rate": "calls with a function call refused",
    "completed_rate": "calls completed at an end node",
    "call_length_s": "mean call length",
}


def decide(candidate: SideStats, baseline: SideStats, policy: CanaryPolicy) -> Verdict:
    """Roll back, promote, or keep watching; the reason names the metric that decided."""
    metrics = len(RATE_METRICS) + 1
    alpha = (1 - policy.confidence) / metrics
    checks: list[MetricCheck] = []
    nc, nb = candidate.calls, baseline.calls
    for name, higher_worse in RATE_METRICS:
        pc, pb = _rate(getattr(candidate, name), nc), _rate(getattr(baseline, name), nb)
        variance = (
            _rate_variance(getattr(candidate, name), nc) + _rate_variance(getattr(baseline, name), nb)
            if nc and nb
            else math.inf
        )
        worse_by = (pc - pb) if higher_worse else (pb - pc)
        checks.append(_check(f"{name}_rate", pc, pb, worse_by, variance, policy.margin, alpha))
    mc, vc = _mean_variance(candidate.duration_sum, candidate.duration_sumsq, nc)
    mb, vb = _mean_variance(baseline.duration_sum, baseline.duration_sumsq, nb)
    length_margin = max(policy.duration_margin * mb, 1.0)
    checks.append(_check("call_length_s", mc, mb, mc - mb, vc + vb, length_margin, alpha))

    worse = [c for c in checks if c.verdict == "worse"]
    if worse:
        why = "; ".join(
            f"{c.metric} ({METRIC_MEANS[c.metric]}) {c.candidate:g} vs {c.baseline:g} "
            f"(worse by {c.low:g} to {c.high:g})"
            for c in worse
        )
        if any(c.metric == "refused_rate" for c in worse):
            why += f"; {candidate.refusals} vs {baseline.refusals} function calls refused in all"
        return Verdict(
            decision="rollback",
            reason=f"candidate worse at {policy.confidence:g} confidence after {nc}/{nb} calls: {why}",
            checks=checks,
        )
    if min(nc, nb) < policy.min_calls:
        return Verdict(
            decision="continue",
            reason=f"{nc} candidate and {nb} baseline calls ended; {policy.min_calls} each needed to promote",
            checks=checks,
        )
    unsure = [c.metric for c in checks if c.verdict != "no_worse"]
    if unsure:
        return Verdict(
            decision="continue",
            reason=f"not yet sure the candidate is no worse on {', '.join(unsure)}",
            checks=checks,
        )
    return Verdict(
        decision="promote",
        reason=(
            f"candidate no worse than the baseline on every metric at {policy.confidence:g} confidence "
            f"after {nc}/{nb} calls"
        ),
        checks=checks,
    )
