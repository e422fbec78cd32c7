"""Keep call data out of the Temporal SDK's own worker logs.

When a signal's payload cannot be decoded, the SDK logs "dropping the signal" with the
exception, and a pydantic error quotes its input: a turn's text, a variable, an SSN. This
filter swaps the exception for a reason that names only locations and error kinds (and the
event id, when the payload had one), whatever handler or format prints the line.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pydantic import ValidationError

from ringflow.callflow.errors import safe_reason

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


def _payload_error(record: logging.LogRecord, exc: BaseException) -> BaseException | None:
    """The error that quotes a payload, if this record is about one: the SDK's own "failed
    decoding / deserializing" lines (their innermost cause), or any pydantic or JSON error in
    the chain. None for anything else (a bug in workflow code keeps its traceback)."""
    chain: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in chain:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    for err in chain:
        if isinstance(err, ValidationError | json.JSONDecodeError | UnicodeDecodeError):
            return err
    decoding = ("Failed decoding", "Failed deserializing")
    if str(record.msg).startswith(decoding) or any(str(e).startswith(decoding) for e in chain):
        return chain[-1]
    return None


class RedactPayloadErrors(logging.Filter):
    """Replace a record's payload-decoding exception (and its traceback text, which quotes
    the payload) by ``reason`` and ``event_id``. Other exceptions (a bug in workflow code)
    keep their traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            cause = _payload_error(record, record.exc_info[1])
            if cause is None:
                return True
            reason, event_id = safe_reason(cause), _event_id(cause)
            record.__dict__.update(reason=reason, event_id=event_id)  # extra fields, as `extra=` sets them
            record.msg = f"{record.getMessage()} (event {event_id or '?'}: {reason})"
            record.args = ()
            record.exc_info = None
            record.exc_text = None
        return True


def install() -> None:
    """Idempotent: one filter on the SDK's workflow logger."""
    logger = logging.getLogger(SDK_WORKFLOW_LOGGER)
    if not any(isinstance(f, RedactPayloadErrors) for f in logger.filters):
        logger.addFilter(RedactPayloadErrors())
