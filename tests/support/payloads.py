"""Every payload inside a Temporal history message, however deep: one walk shared by the
tests that look for a secret at rest (``tests/workflows/test_workflow_secrets.py``) and the
bench that weighs a history's payloads (``bench/history.py``), so both read the same set."""

from __future__ import annotations

from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload


def payloads_in(message: Message) -> list[Payload]:
    """The payloads of ``message`` (search attributes, inputs, results, markers' details),
    found by walking its set fields: map values, repeated items and nested messages."""
    if isinstance(message, Payload):
        return [message]
    found: list[Payload] = []
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            items = list(value.values())
        elif field.is_repeated:
            items = list(value)
        else:
            items = [value]
        for item in items:
            if isinstance(item, Message):
                found += payloads_in(item)
    return found
