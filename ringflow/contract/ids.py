"""Workflow ids: a call's is ``call-<call id>``, a campaign's ``campaign-<campaign id>``, a journey's
``journey-<flow>-<person key>``.

A module of its own (no models), so a command that only names workflows (``ringflow call
list``, ``campaign status``) does not load the call's contract or the campaign's workflow.
"""

from __future__ import annotations

import hashlib
import hmac

CALL_WORKFLOW_PREFIX = "call-"  # a call's workflow id is this prefix and its call id
CAMPAIGN_WORKFLOW_PREFIX = "campaign-"


def call_workflow_id(call_id: str) -> str:
    return f"{CALL_WORKFLOW_PREFIX}{call_id}"


def campaign_workflow_id(campaign_id: str) -> str:
    return f"{CAMPAIGN_WORKFLOW_PREFIX}{campaign_id}"


JOURNEY_WORKFLOW_PREFIX = "journey-"


def person_key(phone: str, secret: bytes | None = None) -> str:
    """A person's key in a journey id and search attributes: a hash of their number, so no
    phone number is in an id, a log line or the Temporal UI (the number stays in the
    journey's input, which only the workers and the CLI read).

    With ``secret`` (``RINGFLOW_JOURNEY_KEY_SECRET``) the hash is keyed (HMAC-SHA256): there
    are only some 10^10 phone numbers, so anyone who sees an id could find the number behind
    an unkeyed hash by hashing them all; without the secret, nobody can. Without a secret,
    the unkeyed key of the first release (``legacy_person_key``)."""
    text = f"ringflow-journey:{phone.strip()}".encode()
    if secret:
        return hmac.new(secret, text, hashlib.sha256).hexdigest()[:20]
    return hashlib.sha256(text).hexdigest()[:20]


def person_keys(phone: str, secret: bytes | None = None) -> list[str]:
    """Every key a person's journeys may be under: the current one first, then (with a
    secret) the unkeyed one journeys started before the secret was set still carry."""
    keys = [person_key(phone, secret)]
    if secret:
        keys.append(person_key(phone))
    return keys


def journey_workflow_id(flow: str, phone: str, secret: bytes | None = None) -> str:
    """One journey per person and flow: ``journey-<flow>-<person key>``."""
    return f"{JOURNEY_WORKFLOW_PREFIX}{flow}-{person_key(phone, secret)}"


def journey_workflow_ids(flow: str, phone: str, secret: bytes | None = None) -> list[str]:
    """The ids the person's journey of ``flow`` may have (``person_keys``), current first."""
    return [f"{JOURNEY_WORKFLOW_PREFIX}{flow}-{k}" for k in person_keys(phone, secret)]
