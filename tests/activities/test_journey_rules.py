"""When a journey's follow-up is due: the person's wall clock, across daylight-saving
changes, inside the calling window (``activities/journeys.py``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ringflow.activities.campaign_rules import RuleError
from ringflow.activities.journeys import follow_up_due
from ringflow.callflow.journey import FollowUp

NY = "America/New_York"


def at(*args: int) -> float:
    return datetime(*args, tzinfo=UTC).timestamp()


def test_in_two_days_at_ten_is_ten_on_the_persons_clock_whatever_the_offset_that_day() -> None:
    fu = FollowUp(after="2d", at="10:00")
    # Friday 16:00 EST -> Sunday 10:00 EDT (clocks went forward at 02:00 that Sunday)
    assert follow_up_due(at(2026, 3, 6, 21), fu, NY, ["always"]) == at(2026, 3, 8, 14)
    # Friday 16:00 EDT -> Sunday 10:00 EST (clocks went back on 1 November 2026)
    assert follow_up_due(at(2026, 10, 30, 20), fu, NY, ["always"]) == at(2026, 11, 1, 15)
    # a time already past on the day the delay reaches: the next day's
    assert follow_up_due(at(2026, 3, 2, 16), FollowUp(at="10:00"), NY, ["always"]) == at(2026, 3, 3, 15)


def test_the_calling_window_moves_it_to_the_next_opening_and_a_delay_alone_is_a_delay() -> None:
    fu = FollowUp(after="2d", at="10:00")
    weekdays = ["Mon-Fri 09:00-17:00"]
    assert follow_up_due(at(2026, 3, 6, 21), fu, NY, weekdays) == at(2026, 3, 9, 13)  # Monday 09:00 EDT
    assert follow_up_due(at(2026, 3, 2, 16), FollowUp(after="90m"), NY, ["always"]) == at(2026, 3, 2, 17, 30)
    with pytest.raises(RuleError, match="not an IANA timezone"):
        follow_up_due(at(2026, 3, 2, 16), fu, "Mars/Olympus", ["always"])
