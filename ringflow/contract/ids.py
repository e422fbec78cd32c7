"""Workflow ids: a call's is ``call-<call id>``, a campaign's ``campaign-<campaign id>``.

A module of its own (no models), so a command that only names workflows (``ringflow call
list``, ``campaign status``) does not load the call's contract or the campaign's workflow.
"""

from __future__ import annotations

CALL_WORKFLOW_PREFIX = "call-"  # a call's workflow id is this prefix and its call id
CAMPAIGN_WORKFLOW_PREFIX = "campaign-"


def call_workflow_id(call_id: str) -> str:
    return f"{CALL_WORKFLOW_PREFIX}{call_id}"


def campaign_workflow_id(campaign_id: str) -> str:
    return f"{CAMPAIGN_WORKFLOW_PREFIX}{campaign_id}"
