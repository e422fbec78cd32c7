"""A journey's activities: when its next call is due, and whether it may be placed now.

Timezones and calling windows need the timezone database, and the do-not-call list the
database: both stay out of the journey's workflow code, which records the answers. Times are
the journey's clock (epoch seconds; scaled in a simulation, see ``workflows/journey.py``).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, date, datetime, time, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from pydantic import BaseModel
from redis.asyncio import Redis
from temporalio import activity
from temporalio.exceptions import ApplicationError

from ringflow.activities import campaign_store as store
from ringflow.activities.campaign_acts import REDIS_REQUIRED
from ringflow.activities.campaign_rules import (
    RuleError,
    Windows,
    check_timezone,
    parse_windows,
    window_open_at,
)
from ringflow.activities.trunk_pace import reserve_slot_at
from ringflow.callflow.journey import FollowUp, at_minutes


class DueRequest(BaseModel):
    now: float
    follow_up: FollowUp
    timezone: str
    windows: list[str]
    rules: Windows | None = None  # a campaign's journey: the campaign's windows, over ``windows``


class DueAnswer(BaseModel):
    due_at: float | None  # None: no calling window opens within three weeks of it
    problem: str = ""


class CheckRequest(BaseModel):
    phone: str
    now: float
    timezone: str
    windows: list[str]
    rules: Windows | None = None  # a campaign's journey: the campaign's windows, over ``windows``
    # a campaign's journey: the call takes the next slot on the trunk's limiter, at this pace
    trunk: str | None = None
    cps: float | None = None


class CheckAnswer(BaseModel):
    verdict: Literal["go", "dnc", "later", "no_window"]
    at: float | None = None  # ``later``: when the window opens
    slot: float | None = None  # ``go`` on a paced trunk: the dial waits for this slot (epoch s)
    problem: str = ""


def _wall(day: date, minute: int, tz: ZoneInfo) -> datetime:
    """``day`` at ``minute`` on the wall clock of ``tz`` (a time skipped by a daylight-saving
    change is read with the offset before it, as zoneinfo does)."""
    return datetime.combine(day, time(minute // 60, minute % 60), tzinfo=tz)


def follow_up_due(now: float, fu: FollowUp, tz_name: str, windows: list[str] | Windows) -> float | None:
    """The follow-up's instant: ``after`` from ``now``; with ``at``, that day (in
    ``tz_name``) at ``at`` on the wall clock, or the next day's when that has passed ("in 2
    days at 10:00" called at 16:00 is 10:00 the day after tomorrow); then the calling
    window's next opening."""
    tz = ZoneInfo(check_timezone(tz_name))
    due = datetime.fromtimestamp(now, UTC) + timedelta(seconds=fu.delay_s())
    if fu.at is not None:
        minute = at_minutes(fu.at)
        local = due.astimezone(tz)
        candidate = _wall(local.date(), minute, tz)
        if candidate.astimezone(UTC) < datetime.fromtimestamp(now, UTC):
            candidate = _wall(local.date() + timedelta(days=1), minute, tz)
        due = candidate.astimezone(UTC)
    rules = windows if isinstance(windows, Windows) else parse_windows(windows)
    opens = window_open_at(rules, tz_name, due)
    return opens.timestamp() if opens is not None else None


class JourneyActivities:
    """``redis_url``: the trunks' limiters, which a campaign's journey paces its calls on
    (``activities/trunk_pace.py``, shared with the campaigns)."""

    def __init__(self, database_url: str, redis_url: str | None = None) -> None:
        self.database_url = database_url
        self.redis_url = redis_url
        self._redis: Redis | None = None

    def all(self) -> list[object]:
        return [self.journey_due, self.journey_check]

    @activity.defn(name="journey_due")
    async def journey_due(self, req: DueRequest) -> DueAnswer:
        try:
            windows = req.rules or req.windows
            return DueAnswer(due_at=follow_up_due(req.now, req.follow_up, req.timezone, windows))
        except (RuleError, ValueError) as exc:
            return DueAnswer(due_at=None, problem=str(exc)[:300])

    @activity.defn(name="journey_check")
    async def journey_check(self, req: CheckRequest) -> CheckAnswer:
        """Right before a journey's call: not on the do-not-call list, inside the window; a
        campaign's journey then takes its slot on the trunk, as the campaign's calls do."""
        if await asyncio.to_thread(store.on_dnc, self.database_url, req.phone):
            return CheckAnswer(verdict="dnc")
        try:
            at = datetime.fromtimestamp(req.now, UTC)
            opens = window_open_at(req.rules or parse_windows(req.windows), req.timezone, at)
        except (RuleError, ValueError) as exc:
            return CheckAnswer(verdict="no_window", problem=str(exc)[:300])
        if opens is None:
            return CheckAnswer(verdict="no_window")
        if opens != at:
            return CheckAnswer(verdict="later", at=opens.timestamp())
        if req.trunk is None or req.cps is None:
            return CheckAnswer(verdict="go")
        if not self.redis_url:
            raise ApplicationError(REDIS_REQUIRED, type="RedisRequired", non_retryable=True)
        if self._redis is None:
            self._redis = Redis.from_url(self.redis_url)
        slot, _ = await reserve_slot_at(self._redis, req.trunk, req.cps)
        return CheckAnswer(verdict="go", slot=slot)
