"""Structured logs: one JSON object per line, each naming the call it belongs to.

An on-call engineer greps one call's story across the worker, the agent and the CLI by
``call_id``, and jumps between a line and its trace by ``trace_id``/``span_id`` (set on
every line logged inside a span). A record learns its call when it is created (``install_record_factory``):
from the agent's call binding (``agents.logcontext``) or the Temporal activity running,
and, for the SDK's workflow and activity loggers, from the context they attach. That works
whichever handler formats the line later, including livekit-agents' own JSON handler in
the agent's job processes.

Call data stays out: exception messages can quote it (a handler's ``ValueError`` with the
caller's words, an HTTP error body), so a line carries the exception's type and stack
frames, never its message, and no payload is ever an argument of a Ringflow log call.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from datetime import UTC, datetime
from typing import IO, Any

from opentelemetry import trace
from temporalio import activity

from ringflow.agents.logcontext import call_fields
from ringflow.contract.call import call_id_of

CALL_FIELDS = ("call_id", "workflow_id", "node")
_STD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}
# Context the Temporal SDK attaches to its workflow/activity loggers' records: ids only.
_TEMPORAL_KEYS = {
    "temporal_workflow": ("workflow_id", "workflow_type", "run_id"),
    "temporal_activity": ("workflow_id", "activity_type", "activity_id", "attempt"),
}
# HTTP clients log each request's full URL at INFO, and an HTTP tool's URL can carry call
# data in its query string: only their warnings get through.
QUIET_LOGGERS = ("httpx", "httpx2", "httpcore", "httpcore2")
_installed = False


def _activity_fields() -> dict[str, str]:
    if not activity.in_activity():
        return {}
    wf_id = activity.info().workflow_id or ""
    call_id = call_id_of(wf_id)
    return {"call_id": call_id, "workflow_id": wf_id} if call_id is not None else {}


def _trace_fields() -> dict[str, str]:
    """``trace_id``/``span_id`` of the span the line is logged in (W3C hex), so a log line
    leads to its trace and a span to its lines; nothing when no span is recording."""
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return {}
    return {"trace_id": format(ctx.trace_id, "032x"), "span_id": format(ctx.span_id, "016x")}


def install_record_factory() -> None:
    """Stamp every record with the call it was logged for; idempotent."""
    global _installed
    if _installed:
        return
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        for key, value in (call_fields() or _activity_fields()).items():
            setattr(record, key, value)
        for key, value in _trace_fields().items():
            setattr(record, key, value)
        return record

    logging.setLogRecordFactory(factory)
    _installed = True


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "event", "message", "call_id", "workflow_id", "node", ...}``.

    ``event`` is the line's stable name: ``extra={"event": ...}`` if given, else the
    message template (the same for every line logged by one call site)."""

    def format(self, record: logging.LogRecord) -> str:
        event = getattr(record, "event", None) or str(record.msg)
        if any(hasattr(record, k) for k in _TEMPORAL_KEYS) and event.endswith(")"):
            event = event.rsplit(" ({", 1)[0]  # the SDK appends its context to the message
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": event,
            "message": record.getMessage(),
        }
        for key, fields in _TEMPORAL_KEYS.items():
            ctx = getattr(record, key, None)
            if isinstance(ctx, dict):
                out.update({f: ctx[f] for f in fields if ctx.get(f) is not None})
        wf_id = out.get("workflow_id") or getattr(record, "workflow_id", None)
        if isinstance(wf_id, str) and (call_id := call_id_of(wf_id)) is not None:
            out.setdefault("call_id", call_id)
        for key, value in vars(record).items():
            if key in _STD_ATTRS or key in _TEMPORAL_KEYS or key.startswith("_") or key == "event":
                continue
            if value is None or isinstance(value, str | int | float | bool):
                out.setdefault(key, value)
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            out["error"] = type(exc).__qualname__
            out["stack"] = [
                f"{f.filename}:{f.lineno} in {f.name}" for f in traceback.extract_tb(exc.__traceback__)
            ][-12:]
        return json.dumps(out, default=str, ensure_ascii=False)


def configure_logging(
    level: str = "INFO", fmt: str = "json", stream: IO[str] | None = None
) -> logging.Handler:
    """Send every logger's lines to ``stream`` (stderr), as JSON lines or plain text.

    Replaces the root handlers this function installed before, so calling it twice (a test,
    then a command) does not print each line twice."""
    install_record_factory()
    handler = logging.StreamHandler(stream or sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter(
                "%(asctime)s %(levelname)s %(name)s %(call_id)s %(message)s", defaults={"call_id": "-"}
            )
        )
    handler.set_name("ringflow")
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == "ringflow"]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
    return handler
