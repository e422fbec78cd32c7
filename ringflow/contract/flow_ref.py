"""A published flow version as calls name it: small enough to sit in every call's input.

A call that names its flow by reference carries this instead of the definition on the wire
(``ringflow/flow_codec.py`` strips the definition when a payload is encoded and puts the
published one back when it is decoded), so its history holds the flow zero times instead of
once per run and once per agent attach.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ringflow.contract.wire import Message

VERSION_PATTERN = r"^[0-9a-f]{12}$"


class FlowRef(Message):
    """``name@version``: ``version`` is the content address (:func:`activities.flow_store.content_id`),
    ``handlers`` the sha256 of each handler module the version was published with, which the
    worker compares with its own copy before the call starts."""

    name: str = Field(min_length=1, max_length=100)
    version: str = Field(pattern=VERSION_PATTERN)
    handlers: dict[str, str] = {}

    def __str__(self) -> str:
        return f"{self.name}@{self.version}"


class CanaryPin(Message):
    """The canary side a call was sent to (table ``flow_canary_calls`` once its record is kept)."""

    canary_id: str = Field(min_length=1, max_length=200)
    side: Literal["candidate", "baseline"]
