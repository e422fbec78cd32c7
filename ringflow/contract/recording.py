"""A call's recording as the workflow, the recording activities and every reader of the
record share it: what was asked of LiveKit Egress, and what came of it.

The store's credentials are never here (they would land in Temporal's history): the
activity adds them from the worker's settings.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# starting: asked for, not confirmed; active: recording; completed: the file is in the store;
# failed: Egress refused or failed (``error`` says why); the call went on regardless.
RecordingStatus = Literal["starting", "active", "completed", "failed"]


class RecordingInfo(BaseModel):
    """The recording of one call: its Egress id, where the file is, how long it is."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = Field(None, max_length=200)  # LiveKit's egress id
    status: RecordingStatus
    location: str | None = Field(None, max_length=1000)  # s3://bucket/key, file:///path, ...
    duration_s: float | None = Field(None, ge=0, allow_inf_nan=False)
    error: str | None = Field(None, max_length=500)


class RecordingRequest(BaseModel):
    """Input of ``start_recording`` and ``stop_recording``. ``egress_id`` is known for a stop
    once the start confirmed it; a stop without it looks the call's egress up by room."""

    call_id: str = Field(min_length=1, max_length=200)
    room: str = Field(min_length=1, max_length=300)
    store: str = Field(min_length=1, max_length=500)
    layout: Literal["mixed", "dual_channel"] = "mixed"
    egress_id: str | None = None


def object_name(call_id: str) -> str:
    """The recording's file name under the store's prefix: one per call, so a retried start
    that finds it already recording is that same recording."""
    return f"{call_id}.ogg"
