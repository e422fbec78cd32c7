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
from temporalio import activity

from ringflow.activities import campaign_store as store
from ringflow.activities.campaign_rules import RuleError, check_timezone, parse_windows, window_open_at
from ringflow.callflow.journey import FollowUp, at_minutes


class DueRequest(BaseModel):
    now: float
    follow_up: FollowUp
    timezone: str
    windows: list[str]


class DueAnswer(BaseModel):
    due_at: float | None  # None: no calling window opens within three weeks of it
    problem: str = ""


class CheckRequest(BaseModel):
    phone: str
    now: float
    timezone: str
    windows: list[str]


class CheckAnswer(BaseModel):
    verdict: Literal["go", "dnc", "later", "no_window"]
    at: float | None = None  # ``later``: when the window opens
    problem: str = ""


def _wall(day: date, minute: int, tz: ZoneInfo) -> datetime:
    """``day`` at ``minute`` on the wall clock of ``tz`` (a time skipped by a daylight-saving
    change is read with the offset before it, as zoneinfo does)."""
    return datetime.combine(day, time(minute // 60, minute % 60), tzinfo=tz)


def follow_up_due(now: float, fu: FollowUp, tz_name: str, windows: list[str]) -> float | None:
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
    opens = window_open_at(parse_windows(windows), tz_name, due)
    return opens.timestamp() if opens is not None else None


class JourneyActivities:
    def __init__(self, database_url: str) -> None:
        self.database_url = database_url

    def all(self) -> list[object]:
        return [self.journey_due, self.journey_check]

    @activity.defn(name="journey_due")
    async def journey_due(self, req: DueRequest) -> DueAnswer:
        try:
            return DueAnswer(due_at=follow_up_due(req.now, req.follow_up, req.timezone, req.windows))
        except (RuleError, ValueError) as exc:
            return DueAnswer(due_at=None, problem=str(exc)[:300])

    @activity.defn(name="journey_check")
    async def journey_check(self, req: CheckRequest) -> CheckAnswer:
        """Right before a journey's call: not on the do-not-call list, inside the window."""
        if await asyncio.to_thread(store.on_dnc, self.database_url, req.phone):
            return CheckAnswer(verdict="dnc")
        try:
            at = datetime.fromtimestamp(req.now, UTC)
            opens = window_open_at(parse_windows(req.windows), req.timezone, at)
        except (RuleError, ValueError) as exc:
            return CheckAnswer(verdict="no_window", problem=str(exc)[:300])
        if opens is None:
            return CheckAnswer(verdict="no_window")
        return (
            CheckAnswer(verdict="go") if opens == at else CheckAnswer(verdict="later", at=opens.timestamp())
        )
