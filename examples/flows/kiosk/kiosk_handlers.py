"""Handlers of the kiosk example: tonight's arrivals at a fictional hotel.

A real kiosk would ask the property-management system; the handler contract stays the same.
"""

from __future__ import annotations

from ringflow import TRANSITION_IN_YAML, FlowManager

ARRIVALS: dict[str, dict[str, str]] = {
    "morgan lee": {"room": "412", "nights": "2"},
    "ari costa": {"room": "207", "nights": "1"},
}


async def find_booking(flow_manager: FlowManager, name: str):
    """Look up tonight's booking under the name the guest gave.

    Args:
        name: The name on the booking, as the guest said it.
    """
    booking = ARRIVALS.get(" ".join(name.lower().split()))
    if booking is None:
        return {"status": "not_found"}, TRANSITION_IN_YAML
    flow_manager.state["booking"] = {"name": name, **booking}
    return {"status": "found", **booking}, TRANSITION_IN_YAML
