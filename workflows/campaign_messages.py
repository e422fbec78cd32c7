"""What a campaign workflow takes and carries across continue-as-new.

Contacts are not here: they are rows in the database (``activities/campaign_store.py``),
so the input and the carry stay a few kilobytes whatever the list's length.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ringflow.activities.campaign_acts import Attempt, Ended
from ringflow.activities.campaign_rules import RetryRule, Windows
from ringflow.activities.campaign_store import Claimed
from ringflow.callflow.canary import contact_key, side_for
from ringflow.callflow.model import FlowDefinition
from ringflow.contract.flow_ref import CanaryPin, FlowRef

CAMPAIGN_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,47}$"


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_concurrent: int = Field(10, ge=1, le=10_000)
    cps: float = Field(1.0, gt=0, le=1000, allow_inf_nan=False)
    max_attempts: int = Field(3, ge=1, le=100)


class LimitsChange(BaseModel):
    """``set_limits``: the fields given change, the others stay."""

    model_config = ConfigDict(extra="forbid")

    max_concurrent: int | None = Field(None, ge=1, le=10_000)
    cps: float | None = Field(None, gt=0, le=1000, allow_inf_nan=False)
    max_attempts: int | None = Field(None, ge=1, le=100)


class LiveCall(BaseModel):
    idx: int
    attempt: int
    call_id: str
    journey_id: str | None = None  # a campaign of journeys: the contact's journey


class CampaignCarry(BaseModel):
    claims: int = 0
    live: list[LiveCall] = []
    stats: dict[str, int] = {}
    recent: list[float] = []  # dial times over the last minute
    paused: bool = False
    pause_reason: str | None = None
    cancelled: bool = False
    limits: Limits
    runs: int = 1
    events_before: int = 0  # history events of the earlier runs
    pending: list[Ended] = []  # calls ended, not recorded yet
    release: list[Attempt] = []  # attempts claimed but not dialed, to give back
    to_start: list[Claimed] = []  # calls whose start the last run did not see confirmed
    journeys: list[LiveCall] = []  # a campaign of journeys: the contacts' open journeys


class CampaignCanary(BaseModel):
    """The canary running on the channel a campaign named when it started: its children are
    split as the channel's other new calls are (``callflow/canary.py``), ``percent`` of its
    contacts to the candidate (``flow_ref``, ``definition``), the rest to the campaign's own
    version (the baseline the channel served when the canary started)."""

    model_config = ConfigDict(extra="forbid")

    canary_id: str = Field(min_length=1, max_length=200)
    percent: float = Field(gt=0, le=100)
    flow_ref: FlowRef
    definition: FlowDefinition
    # Set once the canary has settled (a drive or round reads it): the split ends, and every
    # later attempt runs the side it settled on, the candidate promoted or the campaign's own.
    settled: Literal["promoted", "rolled_back"] | None = None


class CampaignInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    campaign_id: str = Field(pattern=CAMPAIGN_ID)
    definition: FlowDefinition
    # its published version: the children carry it, and their inputs leave the definition out
    flow_ref: FlowRef | None = None
    trunk_id: str = Field(min_length=1, max_length=128)
    from_number: str | None = Field(None, max_length=64)
    ringing_timeout_s: float | None = Field(None, gt=0, le=300)
    limits: Limits = Limits()
    windows: Windows
    retry: dict[str, RetryRule] = {}
    time_scale: float = Field(1.0, gt=0, le=100_000, allow_inf_nan=False)  # retry delays / this
    agent_timeout_s: float = Field(15.0, gt=0, le=3600)
    # continue-as-new past this many (a run's drives need ~6 each, its start ~10)
    max_history_events: int = Field(4000, ge=50, le=40_000)
    # A drive (a round that starts its calls, ``workflows/campaign.py``) comes back this often:
    # ~6 history events each. Pause, cancel and limits reach a drive within a second anyway.
    drive_s: float = Field(10.0, ge=0.2, le=60, allow_inf_nan=False)
    # Each contact's attempt starts the contact's journey (``workflows/journey.py``), which
    # holds its retries and follow-ups; the campaign ends when every journey has.
    journeys: bool = False
    # with no follow-up due, a journey stays open this long after its last call for a callback
    journey_open_for_s: float = Field(7 * 86400, ge=0, le=365 * 86400, allow_inf_nan=False)
    carry: CampaignCarry | None = None
    canary: CampaignCanary | None = None  # a canary on the campaign's channel: its calls are split

    def canary_settled(self, settled: Literal["promoted", "rolled_back"] | None) -> CampaignInput:
        """This input with its canary's split ended, when ``settled`` says it has (a drive's
        or round's answer: replayed as recorded)."""
        c = self.canary
        if settled is None or c is None or c.settled is not None:
            return self
        return self.model_copy(update={"canary": c.model_copy(update={"settled": settled})})

    def flow_for(self, idx: int) -> tuple[FlowDefinition, FlowRef | None, CanaryPin | None]:
        """The definition and version contact ``idx``'s calls run, and the canary side they
        are on: by the stable hash of the contact (``callflow.canary.side_for``), so every
        attempt of a contact, on any run, gets the same one. Deterministic: workflow code."""
        c = self.canary
        if c is None or c.settled == "rolled_back":
            return self.definition, self.flow_ref, None
        if c.settled == "promoted":
            return c.definition, c.flow_ref, None
        side = side_for(c.canary_id, contact_key(self.campaign_id, idx), c.percent)
        pin = CanaryPin(canary_id=c.canary_id, side=side)
        if side == "candidate":
            return c.definition, c.flow_ref, pin
        return self.definition, self.flow_ref, pin
