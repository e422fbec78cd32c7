"""Handlers of the lead_qualification example: lead scoring and a demo calendar in memory.

The calendar is a fixed table of free demo places per half-day; a booking is kept with
the call (in ``flow_manager.state``), so running the example many times in one process
always gives the same answers.
"""

from __future__ import annotations

from typing import Literal

from ringflow import TRANSITION_IN_YAML, FlowManager

TIMELINE_POINTS = {"this_month": 40, "this_quarter": 25, "later": 5, "unknown": 0}
USE_CASE_POINTS = {"shift_planning": 30, "time_tracking": 20, "payroll_export": 15, "other": 0}
DEMO_CALENDAR: dict[str, dict[str, int]] = {
    "Monday": {"morning": 2, "afternoon": 0},
    "Tuesday": {"morning": 1, "afternoon": 3},
    "Wednesday": {"morning": 0, "afternoon": 0},
    "Thursday": {"morning": 2, "afternoon": 2},
    "Friday": {"morning": 1, "afternoon": 0},
}


async def score_lead(flow_manager: FlowManager):
    """Score the lead from the needs captured in discovery.

    Reads the arguments of the record_needs capture from the call's state.
    """
    needs = flow_manager.state.get("record_needs") or {}
    team = int(needs.get("team_size") or 0)
    points = TIMELINE_POINTS.get(str(needs.get("timeline")), 0)
    points += USE_CASE_POINTS.get(str(needs.get("use_case")), 0)
    points += 30 if team >= 20 else 15 if team >= 5 else 0
    tier = "hot" if points >= 70 else "warm" if points >= 40 else "cold"
    return {"tier": tier, "points": points}, TRANSITION_IN_YAML


async def schedule_demo(
    flow_manager: FlowManager,
    day: Literal["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"],
    part_of_day: Literal["morning", "afternoon"],
    attendees: int = 1,
):
    """Book a 30-minute product demo.

    Args:
        day (str): Weekday for the demo.
        part_of_day (str): Morning or afternoon.
        attendees (int): How many people from the caller's team will join.
    """
    free = DEMO_CALENDAR.get(day, {}).get(part_of_day, 0)
    if free <= 0:
        other = "afternoon" if part_of_day == "morning" else "morning"
        return {"status": "full", "try": {"day": day, "part_of_day": other}}, TRANSITION_IN_YAML
    flow_manager.state["demo"] = {"day": day, "part_of_day": part_of_day, "attendees": attendees}
    return {"status": "scheduled", "day": day, "part_of_day": part_of_day}, TRANSITION_IN_YAML
