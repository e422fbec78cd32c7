"""Handlers of the order_jobs example: three slow back-office checks, run as a job group.

Every name and order here is fictional. Each check reports progress through
``flow_manager.update`` (a ``job_update`` envelope), and takes the call's idempotency key
(``flow_manager.idempotency_key``) to its back end, so a check retried after a worker
died is done once there.
"""

from __future__ import annotations

import asyncio

from ringflow import TRANSITION_IN_YAML, FlowManager

STOCK = {"A-100": {"item": "desk lamp", "in_stock": True}}
SHIPPING = {"A-100": {"carrier": "Parcelo Express", "eta": "arrives on Thursday"}}
PAYMENT = {"A-100": {"paid": True}}


async def check_inventory(flow_manager: FlowManager):
    """Check that the order's items are in stock and packed."""
    await flow_manager.update({"step": "warehouse"})
    await asyncio.sleep(0.2)
    order = str(flow_manager.variables.get("order_id"))
    return STOCK.get(order, {"in_stock": False}), TRANSITION_IN_YAML


async def check_shipping(flow_manager: FlowManager):
    """Ask the courier when the order arrives."""
    await asyncio.sleep(0.3)
    order = str(flow_manager.variables.get("order_id"))
    if order not in SHIPPING:
        raise LookupError(f"no shipment for order {order}")
    return SHIPPING[order], TRANSITION_IN_YAML


async def check_payment(flow_manager: FlowManager):
    """Check that the order is paid."""
    await asyncio.sleep(0.1)
    return PAYMENT.get(str(flow_manager.variables.get("order_id")), {"paid": False}), TRANSITION_IN_YAML
