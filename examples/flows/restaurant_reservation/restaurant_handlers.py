"""Handlers of the restaurant_reservation example: an in-memory seating plan.

Only the 7 PM and 8 PM sittings are full; the restaurant is closed on Mondays. All
names are fictional and nothing leaves the process.
"""

from __future__ import annotations

import re

from ringflow import NO_RESPONSE, TRANSITION_IN_YAML, FlowManager, function_options

OPEN_HOURS = range(17, 23)  # 5 PM to 10 PM, last seating at 10
FULL_SITTINGS = {"7:00 PM", "8:00 PM"}
CLOSED_DAYS = {"monday"}
TABLES_FOR_SIZE = {2: 6, 4: 5, 6: 2, 8: 1}
BOOKINGS: list[dict[str, object]] = []


def _hour(time: str) -> int | None:
    m = re.match(r"^\s*(\d{1,2})(?::(\d{2}))?\s*([AaPp][Mm])\s*$", time)
    if not m:
        return None
    hour = int(m.group(1)) % 12
    return hour + 12 if m.group(3).lower() == "pm" else hour


async def record_party_size(flow_manager: FlowManager, size: int):
    """Record how many people the table is for.

    Args:
        size (int): Number of guests, children included.
    """
    flow_manager.state["party_size"] = size
    return {"status": "recorded", "size": size}, TRANSITION_IN_YAML


@function_options(timeout_s=5, cancel_on_interruption=False)
async def check_availability(flow_manager: FlowManager, time: str, party_size: int, day: str = "today"):
    """Check whether a table is free at the requested time.

    Args:
        time (str): Requested time, "H:00 PM" between 5 PM and 10 PM, e.g. "7:00 PM".
        party_size (int): Number of guests.
        day (str): Day of the week, or "today".
    """
    flow_manager.state["requested_time"] = f"{time} {day}" if day != "today" else time
    if day.strip().lower() in CLOSED_DAYS:
        return {"status": "closed", "reason": "We are closed on Mondays."}, TRANSITION_IN_YAML
    hour = _hour(time)
    if hour is None or hour not in OPEN_HOURS:
        return {"status": "closed", "reason": "We seat guests from 5 PM to 10 PM."}, TRANSITION_IN_YAML
    seats = min((s for s in TABLES_FOR_SIZE if s >= party_size), default=None)
    if seats is None or time.strip().upper() in FULL_SITTINGS:
        alternatives = [t for t in ("6:00 PM", "9:00 PM") if t != time]
        flow_manager.state["alternatives"] = alternatives
        return {"status": "unavailable", "alternatives": alternatives}, TRANSITION_IN_YAML
    return {"status": "available", "time": time, "table_for": seats}, TRANSITION_IN_YAML


async def book_table(flow_manager: FlowManager, name: str, special_requests: list[str] | None = None):
    """Book the table that check_availability found free.

    Args:
        name (str): Name the reservation is under.
        special_requests (list[str]): Requests such as "high chair" or "window seat", if any.
    """
    time = flow_manager.state.get("requested_time")
    size = flow_manager.state.get("party_size")
    if time is None or size is None:
        return {"booked": False, "reason": "check availability first"}, TRANSITION_IN_YAML
    booking = {"name": name, "time": time, "party_size": size, "requests": special_requests or []}
    BOOKINGS.append(booking)
    flow_manager.state["booking"] = booking
    return {"booked": True, "reference": f"LT-{len(BOOKINGS):04d}"}, TRANSITION_IN_YAML


async def note_dietary_needs(flow_manager: FlowManager, needs: str):
    """Note allergies or dietary needs for the kitchen, without a spoken reply.

    Args:
        needs (str): The needs in the caller's words, e.g. "one guest is vegan".
    """
    flow_manager.state.setdefault("dietary_needs", []).append(needs)
    return {"noted": True}, NO_RESPONSE
