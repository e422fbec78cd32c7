"""Handlers of the ivr_menu example: a fictional billing ledger.

A real deployment would ask the billing system; the handler contract stays the same.
"""

from __future__ import annotations

from ringflow import TRANSITION_IN_YAML, FlowManager

DUE = {"default": {"amount": "42.10", "due": "the 15th"}}


async def look_up_bill(flow_manager: FlowManager):
    """Look up the caller's current bill: the amount and when it is due."""
    bill = DUE["default"]
    flow_manager.state["bill"] = bill
    return {"status": "ok", **bill}, TRANSITION_IN_YAML
