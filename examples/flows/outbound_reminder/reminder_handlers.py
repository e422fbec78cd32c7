"""Handlers of the outbound_reminder example: where a promise to pay is written down.

A real deployment would record it in the billing system; the handler contract stays the same.
"""

from __future__ import annotations

from ringflow import TRANSITION_IN_YAML, FlowManager


async def record_promise(flow_manager: FlowManager, date: str):
    """Write down the date the customer promises to pay by.

    Args:
        date (str): The date they gave, as they said it, e.g. "Friday".
    """
    flow_manager.state["promise"] = {"date": date}
    return {"status": "recorded", "date": date}, TRANSITION_IN_YAML
