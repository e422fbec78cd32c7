"""A signal the worker drops is logged with its event id and reason, never its content."""

from __future__ import annotations

import logging

import pytest
from pydantic import BaseModel, ValidationError
from temporalio.client import Client

from ringflow.callflow.errors import safe_reason
from tests.support.wfkit import running_worker, start

SSN = "123-45-6789"


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Each record as a plain-text handler prints it, traceback included."""
    fmt = logging.Formatter("%(levelname)s %(name)s %(message)s")
    return [fmt.format(r) for r in caplog.records]


async def test_a_dropped_signal_is_logged_without_its_payload(
    temporal_client: Client, task_queue: str, sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue)
        # a payload that is not a TurnsEvent: the SDK drops it before any workflow code runs
        # (or, with defensive handlers, the workflow records it as rejected)
        await call.handle.signal("turns", {"event_id": "ev-leak-1", "note": f"my SSN is {SSN}"})
        await call.hangup()  # signals apply in order: once the call is over, the drop was logged
        await call.handle.result()
    text = "\n".join(_lines(caplog))
    assert SSN not in text
    if _sdk_drops():
        line = next(line for line in _lines(caplog) if "dropping the signal" in line)
        assert "event ev-leak-1" in line and "ValidationError" in line and "missing" in line


def _sdk_drops() -> bool:
    """Whether the workflow's ``turns`` handler still takes a typed payload (the SDK then
    decodes, and drops, a wrong one) rather than the raw payload."""
    import inspect

    from ringflow.contract.events import TurnsEvent
    from ringflow.workflows.call import CallWorkflow

    handler = getattr(CallWorkflow, "turns", None)  # gone once every signal is taken raw
    return handler is not None and TurnsEvent in inspect.get_annotations(handler, eval_str=True).values()


class _Ev(BaseModel):
    event_id: str
    text: str
    seq: int


def test_safe_reason_names_places_and_kinds_only() -> None:
    with pytest.raises(ValidationError) as caught:
        _Ev.model_validate({"event_id": "e", "text": 42, "seq": SSN})
    reason = safe_reason(caught.value)
    assert reason == "ValidationError: text: string_type; seq: int_parsing"
    assert SSN not in reason and SSN in str(caught.value)  # pydantic's own message quotes it
    assert safe_reason(ValueError(f"bad {SSN}")) == "ValueError"


def test_a_bug_in_workflow_code_keeps_its_traceback() -> None:
    from ringflow.workflows.log_redaction import RedactPayloadErrors

    try:
        raise KeyError("node")
    except KeyError as exc:
        bug = logging.LogRecord(
            "temporalio.worker._workflow_instance",
            logging.WARNING,
            __file__,
            1,
            "Failed activation on workflow",
            (),
            (type(exc), exc, exc.__traceback__),
        )
    assert RedactPayloadErrors().filter(bug) and bug.exc_info is not None


def test_the_sdks_drop_line_loses_the_payload_but_names_the_event() -> None:
    """The record the SDK logs when it cannot decode a typed signal's payload (the path of
    any handler still typed), as the filter leaves it."""
    from ringflow.workflows.log_redaction import RedactPayloadErrors

    try:
        try:
            _Ev.model_validate({"event_id": "ev-7", "text": SSN})
        except ValidationError as inner:
            raise RuntimeError("Failed decoding arguments") from inner
    except RuntimeError as exc:
        record = logging.LogRecord(
            "temporalio.worker._workflow_instance",
            logging.ERROR,
            __file__,
            1,
            "Failed deserializing signal input for turns, dropping the signal",
            (),
            (type(exc), exc, exc.__traceback__),
        )
    assert RedactPayloadErrors().filter(record)
    line = logging.Formatter("%(message)s").format(record)
    assert SSN not in line and record.exc_info is None
    assert "event ev-7: ValidationError: seq: missing" in line
