"""Handlers of the order_status example: a small in-memory order book and courier.

Every name and parcel here is fictional. A real deployment would call the shop's order
system and the courier's tracking API; the handler contract stays the same.
"""

from __future__ import annotations

from typing import Literal

from ringflow import TRANSITION_IN_YAML, FlowManager

ORDERS: dict[str, dict[str, object]] = {
    "c-100": {"first_name": "Dana", "item": "desk lamp", "tracking_no": "PX-1", "value": 39},
    "c-200": {"first_name": "Kai", "item": "office chair", "tracking_no": "PX-2", "value": 240},
    "c-300": {"first_name": "Sam", "item": "bookshelf", "tracking_no": "PX-3", "value": 120},
}
COURIER: dict[str, dict[str, str]] = {
    "PX-1": {"state": "in_transit", "eta": "on Thursday"},
    "PX-2": {"state": "delivered", "delivered_at": "yesterday at 2 PM"},
    "PX-3": {"state": "lost"},
}
REFUND_LIMIT = 50  # refunds up to this value are approved at once


async def lookup_order(flow_manager: FlowManager):
    """Find the caller's open order before the call starts."""
    order = ORDERS.get(str(flow_manager.variables.get("customer_id")))
    if order is None:
        return {"status": "none"}, TRANSITION_IN_YAML
    return {"status": "found", **order}, TRANSITION_IN_YAML


async def track_parcel(flow_manager: FlowManager):
    """Ask the courier where the order's parcel is."""
    order = flow_manager.state.get("order") or {}
    return dict(COURIER.get(str(order.get("tracking_no")), {"state": "lost"})), TRANSITION_IN_YAML


async def request_refund(flow_manager: FlowManager, reason: Literal["damaged", "late", "unwanted", "other"]):
    """File a refund request for the caller's order.

    Args:
        reason (str): Why the caller wants their money back.
    """
    flow_manager.state["refund_request"] = {"reason": reason}
    return {"status": "filed", "reason": reason}, TRANSITION_IN_YAML


async def refund_decision(flow_manager: FlowManager):
    """Approve a refund at once when the order is small, otherwise send it for review."""
    order = flow_manager.state.get("order") or {}
    value = int(order.get("value") or 0)
    decision = "approved" if value <= REFUND_LIMIT else "review"
    return {"decision": decision, "amount": value}, TRANSITION_IN_YAML
