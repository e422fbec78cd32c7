"""Handlers of the support_triage example: outages, invoices and tickets, all in memory."""

from __future__ import annotations

import itertools
from typing import Literal

from ringflow import NO_RESPONSE, TRANSITION_IN_YAML, FlowManager, function_options

OUTAGES: dict[str, str] = {"NW4": "fibre repair in progress, expected fixed by 6 PM"}
INVOICES: dict[str, dict[str, object]] = {
    "INV-2041": {"amount": 39.0, "status": "paid", "charged_twice": False},
    "INV-2042": {"amount": 39.0, "status": "paid", "charged_twice": True},
}
_ticket_numbers = itertools.count(5001)


async def check_outage(flow_manager: FlowManager, postcode_area: str):
    """Check for a known network outage in the caller's area.

    Args:
        postcode_area (str): The first part of the postcode, e.g. "NW4".
    """
    area = postcode_area.strip().upper()
    outage = OUTAGES.get(area)
    flow_manager.state["outage"] = {"area": area, "known": outage is not None}
    if outage is None:
        return {"outage": False}, TRANSITION_IN_YAML
    return {"outage": True, "details": outage}, TRANSITION_IN_YAML


@function_options(timeout_s=8)
async def create_ticket(
    flow_manager: FlowManager,
    summary: str,
    priority: Literal["low", "normal", "high"] = "normal",
):
    """Open a ticket for the technicians.

    Args:
        summary (str): What is wrong and what was already tried.
        priority (str): How urgent it is; "high" when the caller is blocked from working.
    """
    tier = flow_manager.variables.get("customer_tier", "standard")
    hours = 4 if tier == "premium" or priority == "high" else 24
    ticket = {
        "id": f"T-{next(_ticket_numbers)}",
        "priority": priority,
        "response_hours": hours,
        "summary": summary,
    }
    flow_manager.state["ticket"] = ticket
    return {"ticket_id": ticket["id"], "response_hours": hours}, TRANSITION_IN_YAML


async def lookup_invoice(flow_manager: FlowManager, invoice_number: str):
    """Find an invoice by its number.

    Args:
        invoice_number (str): The number printed on the invoice, e.g. "INV-2041".
    """
    invoice = INVOICES.get(invoice_number.strip().upper())
    if invoice is None:
        return {"found": False}, TRANSITION_IN_YAML
    return {"found": True, **invoice}, TRANSITION_IN_YAML


async def request_refund(flow_manager: FlowManager, invoice_number: str, reason: str):
    """Request a refund for an invoice that was charged twice.

    Args:
        invoice_number (str): The invoice to refund.
        reason (str): Why the caller asks for the refund, in a few words.
    """
    invoice = INVOICES.get(invoice_number.strip().upper())
    if invoice is None or not invoice["charged_twice"]:
        return {"decision": "review", "reason": reason}, TRANSITION_IN_YAML
    flow_manager.state["refund"] = {"invoice": invoice_number, "amount": invoice["amount"]}
    return {"decision": "approved", "amount": invoice["amount"]}, TRANSITION_IN_YAML


async def log_troubleshooting_started(flow_manager: FlowManager):
    """Note that troubleshooting started, for the support dashboard."""
    flow_manager.state["troubleshooting_started"] = True
    return None, NO_RESPONSE
