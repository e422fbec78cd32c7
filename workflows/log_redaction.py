"""Keep call data out of the Temporal SDK's own worker logs.

When a signal's payload cannot be decoded, the SDK logs "dropping the signal" with the
exception, and a pydantic error quotes its input: a turn's text, a variable, an SSN. This
filter swaps the exception for a reason that names only locations and error kinds (and the
event id, when the payload had one), whatever handler or format prints the line.
"""

from __future__ import annotations

import logging
from typing import Any

from callflow.errors import safe_reason

SDK_WORKFLOW_LOGGER = "temporalio.worker._workflow_instance"


def _event_id(exc: BaseException) -> str | None:
    """The payload's ``event_id`` if pydantic saw a mapping with a short string one."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return None
    try:
        items: Any = errors(include_url=False)
    except Exception:
        return None
    for err in items if isinstance(items, list) else []:
        value = err.get("input") if isinstance(err, dict) else None
        if isinstance(value, dict) and isinstance(value.get("event_id"), str):
            return value["event_id"][:128]
    return None


class RedactPayloadErrors(logging.Filter):
    """Replace a record's exception (and its traceback text) by ``reason`` and ``event_id``."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            cause = exc.__cause__ or exc  # the SDK wraps the converter's error
            record.reason = safe_reason(cause)
            record.event_id = _event_id(cause)
            record.msg = f"{record.getMessage()} (event {record.event_id or '?'}: {record.reason})"
            record.args = ()
            record.exc_info = None
            record.exc_text = None
        return True


def install() -> None:
    """Idempotent: one filter on the SDK's workflow logger."""
    logger = logging.getLogger(SDK_WORKFLOW_LOGGER)
    if not any(isinstance(f, RedactPayloadErrors) for f in logger.filters):
        logger.addFilter(RedactPayloadErrors())
