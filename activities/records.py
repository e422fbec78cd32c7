"""The call record: what a finished (or running) call looks like outside Temporal.

Plain pydantic so that the workflow (inside the sandbox), the activities and the webhook
receiver all share one schema; the pydantic data converter carries it through Temporal.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


def _utc(value: datetime | None) -> datetime | None:
    """Naive datetimes are taken as UTC (SQLite hands them back naive)."""
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


class CallRecord(BaseModel):
    """A snapshot of one call; ``updated_at`` orders snapshots (newer wins on upsert)."""

    model_config = ConfigDict(extra="forbid")

    call_id: str = Field(min_length=1, max_length=200)
    workflow_id: str
    flow: str
    flow_version: int = 1
    status: str = "running"
    node: str | None = None
    path: list[str] = Field(default_factory=list)
    variables: dict[str, Any] = Field(default_factory=dict)
    extracted: dict[str, Any] = Field(default_factory=dict)
    state: dict[str, Any] = Field(default_factory=dict)
    disposition: str | None = None
    tags: list[str] = Field(default_factory=list)
    end_reason: str | None = None
    transcript: list[dict[str, Any]] = Field(default_factory=list)
    started_at: datetime
    ended_at: datetime | None = None
    updated_at: datetime
    direction: str = "outbound"
    campaign_id: str | None = None

    @field_validator("started_at", "ended_at", "updated_at")
    @classmethod
    def _as_utc(cls, value: datetime | None) -> datetime | None:
        return _utc(value)


class TranscriptItem(BaseModel):
    """One transcript entry. ``idx`` is its position in the call, which makes re-sending
    the same entries (an activity retry) harmless."""

    model_config = ConfigDict(extra="forbid")

    idx: int = Field(ge=0)
    role: str
    text: str = ""
    node: str | None = None
    at: datetime | None = None
    data: dict[str, Any] = Field(default_factory=dict)

    @field_validator("at")
    @classmethod
    def _as_utc(cls, value: datetime | None) -> datetime | None:
        return _utc(value)


class TranscriptAppend(BaseModel):
    """Input of ``append_transcript``: entries of one call to add (or re-add)."""

    call_id: str = Field(min_length=1, max_length=200)
    items: list[TranscriptItem]


class WebhookDelivery(BaseModel):
    """Input of ``post_call_webhook``. The workflow fills ``run_id`` from
    ``workflow.info().run_id`` and ``sent_at`` from ``workflow.now()``."""

    record: CallRecord
    run_id: str = ""
    event: str = "call.ended"
    sent_at: datetime
    # The transcript is in the database (too long for a payload, or split by continue-as-new):
    # the activity puts it into the record before sending, so the receiver gets all of it.
    transcript_in_db: bool = False


class DispatchRequest(BaseModel):
    call_id: str
    room: str | None = None
    attempt: int = 1


class DispatchResult(BaseModel):
    dispatched: bool
    detail: str = ""
