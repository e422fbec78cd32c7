"""Validation rules for a flow's ``recording`` settings: a store Ringflow can hand to LiveKit
Egress, and a consent node that exists. Offline: no store is contacted here."""

from __future__ import annotations

from ringflow.callflow.errors import did_you_mean
from ringflow.callflow.model import Flow
from ringflow.callflow.validate_checker import Checker

STORE_SCHEMES = ("s3://", "gs://", "azure://", "file:///")


def store_problem(store: str) -> str | None:
    """Why ``store`` cannot be a recording target, None when it can (shared with the
    activity that starts the egress, so both read a store the same way)."""
    if not store.startswith(STORE_SCHEMES):
        return f"store '{store}' must start with one of {', '.join(STORE_SCHEMES)}"
    if store.startswith("file:///"):
        return None if len(store) > len("file:///") else "a file:/// store names its folder: file:///DIR"
    bucket = store.split("://", 1)[1].split("/", 1)[0]
    if not bucket:
        return f"store '{store}' names no bucket: {store.split('://', 1)[0]}://BUCKET/PREFIX/"
    return None


def check_recording(checker: Checker, flow: Flow) -> None:
    rec = flow.recording
    if rec is None:
        return
    if rec.enabled and not rec.store:
        checker.err(
            "recording.store",
            "a recording needs a store: s3://BUCKET/PREFIX/, gs://, azure:// or file:///DIR",
        )
    elif rec.store and (problem := store_problem(rec.store)) is not None:
        checker.err("recording.store", problem)
    if rec.consent is not None:
        checker.check_template("recording.consent.say", rec.consent.say)
    target = rec.record_after_consent
    if target is not None and target not in flow.nodes:
        checker.err(
            "recording.record_after_consent",
            f"unknown node '{target}'{did_you_mean(target, list(flow.nodes))}",
        )
    if target is not None and target == flow.start_node:
        checker.warn(
            "recording.record_after_consent",
            "the start node: every call is recorded from its start, consent or not",
        )
