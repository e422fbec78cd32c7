"""The example CRM's MCP server (Streamable HTTP): ``python crm_server.py [PORT]``, default
8765, serving ``http://127.0.0.1:PORT/mcp``. The ``crm_mcp`` flow's tools are these; a real
CRM would answer from its database and honour ``_meta["ringflow/idempotency-key"]``."""

from __future__ import annotations

import sys
from typing import Any

from mcp.server.mcpserver import Context, MCPServer

CUSTOMERS = {
    "+15550100": {"name": "Dana Reyes", "orders": {"A-1001": "shipped on Monday, arriving Thursday"}}
}
server = MCPServer("northwind-crm")
_tickets: dict[str, str] = {}  # idempotency key -> ticket: a retried call opens no second ticket


@server.tool()
async def lookup_customer(phone: str) -> dict[str, Any]:
    """Find a customer by the phone number on their account (E.164, e.g. +15550100)."""
    customer = CUSTOMERS.get(phone.replace(" ", ""))
    if customer is None:
        return {"found": False}
    return {"found": True, "name": customer["name"], "orders": sorted(customer["orders"])}


@server.tool()
async def order_status(order_id: str) -> dict[str, Any]:
    """The delivery status of an order, by its number (like A-1001)."""
    for customer in CUSTOMERS.values():
        if order_id in customer["orders"]:
            return {"order_id": order_id, "status": customer["orders"][order_id]}
    return {"order_id": order_id, "status": "unknown order"}


@server.tool()
async def open_ticket(summary: str, ctx: Context, phone: str | None = None) -> dict[str, Any]:
    """Open a support ticket about the caller's problem; returns the ticket number to read out."""
    key = str((ctx.request_context.meta or {}).get("ringflow/idempotency-key", ""))
    if key and key in _tickets:
        return {"ticket": _tickets[key]}
    ticket = f"T-{4000 + len(_tickets) + 1}"
    if key:
        _tickets[key] = ticket
    return {"ticket": ticket}


if __name__ == "__main__":
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]) if len(sys.argv) > 1 else 8765)
