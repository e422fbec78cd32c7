"""What LiveKit says about a call's room: its webhooks, relayed by ``agents/webhooks.py`` as
the ``room_event`` signal and applied by ``workflows/room_events.py``."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class RoomEvent(BaseModel):
    model_config = ConfigDict(extra="forbid")

    event_id: str = Field(min_length=1, max_length=128)
    kind: Literal["agent_left", "caller_left", "room_finished"]
    identity: str | None = Field(None, max_length=256)
    reason: str | None = Field(None, max_length=64)  # LiveKit's DisconnectReason name
    at: float | None = Field(None, allow_inf_nan=False)
