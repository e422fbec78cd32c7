"""Handlers of the appointment_reminder example: a small in-memory clinic schedule.

Every name and date here is fictional. A real deployment would read the schedule from
the clinic's system; the handler contract stays the same.
"""

from __future__ import annotations

from ringflow import TRANSITION_IN_YAML, FlowManager, function_options

APPOINTMENTS: dict[str, dict[str, str]] = {
    "apt-1001": {"patient": "Robin Tester", "birth_year": "1987", "slot": "Tuesday 3 PM"},
    "apt-1002": {"patient": "Kai Example", "birth_year": "1990", "slot": "Friday 11 AM"},
}
OPEN_SLOTS: list[str] = ["Wednesday 10 AM", "Wednesday 2 PM", "Thursday 9 AM"]
TAKEN_SLOTS: set[str] = {"Wednesday 2 PM"}


def _appointment_id(flow_manager: FlowManager) -> str:
    return str(flow_manager.variables.get("appointment_id", ""))


async def check_identity(flow_manager: FlowManager, birth_year: str):
    """Check the caller's year of birth against the appointment's patient.

    Args:
        birth_year (str): The year of birth the person gave, four digits, e.g. "1987".
    """
    appointment = APPOINTMENTS.get(_appointment_id(flow_manager))
    if appointment is None:
        return {"status": "unknown_appointment"}, TRANSITION_IN_YAML
    attempts = int(flow_manager.state.get("identity_attempts", 0)) + 1
    flow_manager.state["identity_attempts"] = attempts
    if birth_year.strip() == appointment["birth_year"]:
        flow_manager.state["identity_verified"] = True
        return {"status": "verified"}, TRANSITION_IN_YAML
    if attempts >= 2:
        return {"status": "too_many_attempts"}, TRANSITION_IN_YAML
    return {"status": "mismatch", "hint": "Ask them to repeat the year once more."}, TRANSITION_IN_YAML


async def list_open_slots(flow_manager: FlowManager):
    """List the appointment slots still open this week."""
    slots = [s for s in OPEN_SLOTS if s not in TAKEN_SLOTS]
    return {"slots": slots}, TRANSITION_IN_YAML


@function_options(timeout_s=5)
async def reschedule_appointment(flow_manager: FlowManager, slot: str, note: str | None = None):
    """Move the appointment to another open slot.

    Args:
        slot (str): One of the slots from list_open_slots, e.g. "Thursday 9 AM".
        note (str): Anything the patient wants the clinic to know, if they said so.
    """
    if slot not in OPEN_SLOTS:
        return {"status": "unknown_slot", "open_slots": OPEN_SLOTS}, TRANSITION_IN_YAML
    if slot in TAKEN_SLOTS:
        return {"status": "slot_taken", "slot": slot}, TRANSITION_IN_YAML
    flow_manager.state["appointment"] = {"id": _appointment_id(flow_manager), "slot": slot, "note": note}
    return {"status": "rescheduled", "slot": slot}, TRANSITION_IN_YAML


async def cancel_appointment(flow_manager: FlowManager, reason: str = "not given"):
    """Cancel the appointment because the patient no longer needs it.

    Args:
        reason (str): Why the patient cancels, in a few words, if they said.
    """
    flow_manager.state["cancelled"] = {"id": _appointment_id(flow_manager), "reason": reason}
    return {"status": "cancelled"}, TRANSITION_IN_YAML
