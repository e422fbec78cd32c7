"""Workflow ids: a call's is ``call-<call id>``, a campaign's ``campaign-<campaign id>``, a journey's
``journey-<flow>-<person key>``.

A module of its own (no models), so a command that only names workflows (``ringflow call
list``, ``campaign status``) does not load the call's contract or the campaign's workflow.
"""

from __future__ import annotations

import hashlib

CALL_WORKFLOW_PREFIX = "call-"  # a call's workflow id is this prefix and its call id
CAMPAIGN_WORKFLOW_PREFIX = "campaign-"


def call_workflow_id(call_id: str) -> str:
    return f"{CALL_WORKFLOW_PREFIX}{call_id}"


def campaign_workflow_id(campaign_id: str) -> str:
    return f"{CAMPAIGN_WORKFLOW_PREFIX}{campaign_id}"


JOURNEY_WORKFLOW_PREFIX = "journey-"


def person_key(phone: str) -> str:
    """A person's key in a journey id and search attributes: a hash of their number, so no
    phone number is in an id, a log line or the Temporal UI (the number stays in the
    journey's input, which only the workers and the CLI read)."""
    return hashlib.sha256(f"ringflow-journey:{phone.strip()}".encode()).hexdigest()[:20]


def journey_workflow_id(flow: str, phone: str) -> str:
    """One journey per person and flow: ``journey-<flow>-<person key>``."""
    return f"{JOURNEY_WORKFLOW_PREFIX}{flow}-{person_key(phone)}"
