"""A call's post-call analysis as the workflow, the analysis activity and every reader of
the record share it: summary, success evaluation, sentiment and the flow's custom fields."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ringflow.callflow.model import AnalysisSettings

Sentiment = Literal["positive", "neutral", "negative"]


class SuccessEvaluation(BaseModel):
    """Pass or fail against the flow's rubric, a score from 0 to 1, and why. ``pass`` is the
    name on the wire (the record, the webhook, scripts' ``expect.analysis``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)

    passed: bool = Field(alias="pass")
    score: float | None = Field(None, ge=0, le=1, allow_inf_nan=False)
    reason: str | None = Field(None, max_length=2000)


class CallAnalysis(BaseModel):
    """What the analysis found; ``error`` when it could not run (the call's outcome stands)."""

    model_config = ConfigDict(extra="forbid")

    summary: str | None = Field(None, max_length=8000)
    success: SuccessEvaluation | None = None
    sentiment: Sentiment | None = None
    fields: dict[str, Any] = Field(default_factory=dict)
    error: str | None = Field(None, max_length=500)


class AnalysisInput(BaseModel):
    """Input of ``analyze_call``: the whole transcript, inline or (``transcript_in_db``, a
    long or continued-as-new call's) read from the database by the activity."""

    call_id: str = Field(min_length=1, max_length=200)
    settings: AnalysisSettings
    transcript: list[dict[str, Any]] = Field(default_factory=list)
    transcript_in_db: bool = False
    model: str | None = None
