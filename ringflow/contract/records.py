"""The call record: what a finished (or running) call looks like outside Temporal, its
transcript entries, and the post-call webhook that delivers it.

Plain pydantic so that the workflow (inside the sandbox), the activities and the webhook
receiver all share one schema; the pydantic data converter carries it through Temporal.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ringflow.contract.analysis import CallAnalysis
from ringflow.contract.recording import RecordingInfo


def _utc(value: datetime | None) -> datetime | None:
    """Naive datetimes are taken as UTC (SQLite hands them back naive)."""
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


class SipOutcome(BaseModel):
    """How the phone network answered an outbound dial: LiveKit's SIP status, the one field
    a dialer's report needs (busy lines, numbers that never answer)."""

    model_config = ConfigDict(extra="forbid")

    outcome: str = Field(max_length=40)  # answered, no_answer, busy, dial_failed
    code: int | None = None  # SIP status code (200, 408, 486...)
    status: str | None = Field(None, max_length=200)  # its reason phrase
    detail: str = Field("", max_length=1000)
    followed: bool = False  # a retried dial followed an earlier attempt's instead of ringing again
    at: datetime | None = None

    @field_validator("at")
    @classmethod
    def _as_utc(cls, value: datetime | None) -> datetime | None:
        return _utc(value)


class AmdVerdict(BaseModel):
    """Who picked up a dialed call, as the agent's answering-machine detection judged it
    (livekit-agents' AMD): kept for every verdict, a human one too, so a campaign can tell
    reached people from machines and tune its detection on the timings."""

    model_config = ConfigDict(extra="forbid")

    result: Literal["human", "machine", "unknown"]
    category: str = Field(max_length=40)  # AMD's own: human, machine-vm, machine-ivr, uncertain...
    reason: str | None = Field(None, max_length=500)
    speech_s: float | None = Field(None, ge=0, allow_inf_nan=False)  # callee speech it judged on
    delay_s: float | None = Field(None, ge=0, allow_inf_nan=False)  # its decision time
    at: datetime | None = None

    @field_validator("at")
    @classmethod
    def _as_utc(cls, value: datetime | None) -> datetime | None:
        return _utc(value)


def amd_result(category: str) -> Literal["human", "machine", "unknown"]:
    if category == "human":
        return "human"
    return "machine" if category.startswith("machine") else "unknown"


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
    room: str | None = None  # the LiveKit room the call ran in (inbound: LiveKit named it)
    # the line's numbers: an inbound call's caller, a dialed call's callee (``call forget
    # --phone`` finds a person's calls by them)
    caller_number: str | None = None
    called_number: str | None = None
    sip: SipOutcome | None = None  # a dialed call: how the phone network answered
    amd: AmdVerdict | None = None  # a dialed call: who picked up (answering-machine detection)
    recording: RecordingInfo | None = None  # the call's audio, when its flow records it
    analysis: CallAnalysis | None = None  # the post-call analysis, when its flow asks for one
    # the LLM's function calls the flow refused (``CallState.refused``; None: recorded before
    # the count was kept), which a canary compares its sides by
    refused: int | None = None
    # the canary side a campaign sent the call to (``CallInput.canary``), "<canary id>:<side>";
    # kept in ``flow_canary_calls``, not in ``calls``
    canary: str | None = None

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
    # The flow asks for personal data to be kept out of what leaves the call (``analysis.redact``):
    # the receiver gets the transcript redacted (``activities/redaction.py``).
    redact: bool = False
