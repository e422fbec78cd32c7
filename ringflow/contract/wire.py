"""How a message is shaped and bounded on the wire.

What is sent is strict (unknown fields refused); what the workflow answers is read
tolerantly, since agents and workers roll out separately. Every limit on a payload counts
bytes the way the pydantic data converter encodes them (``encoded_bytes``).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import to_json

MAX_TEXT_CHARS = 16_000  # one turn's text; a longer one is refused, not truncated silently
MAX_ARGS_BYTES = 32_000
MAX_BATCH = 200
# Free text that is not conversation: ids, node and function names, rooms and numbers. Each
# is copied into state, logs or search attributes, so none may be arbitrarily long.
MAX_ID_CHARS = 128
MAX_NAME_CHARS = 128  # node ids and function names are at most 64 in a valid flow
MAX_ROUTE_CHARS = 256  # rooms, campaign ids, phone numbers and SIP URIs
MAX_SIGNAL_BYTES = 256 * 1024  # one signal's encoded payload (the client refuses a larger one)
# Times are seconds since the epoch. Bounded and finite so that a hostile ``1e20`` or ``NaN``
# is refused when the message arrives, not when workflow code turns it into a datetime.
MAX_EPOCH_S = 1e10  # the year 2286
MAX_SEQ = 2**53  # exact in a JSON number everywhere

Epoch = Annotated[float, Field(ge=0, le=MAX_EPOCH_S, allow_inf_nan=False)]
Seq = Annotated[int, Field(ge=1, le=MAX_SEQ)]
EventId = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS)]
# The number of an agent's attach to its call, issued by the workflow (1 for the first):
# what the agent of that attach sends carries it, and the workflow refuses an older one.
AgentEpoch = Annotated[int, Field(ge=1, le=MAX_SEQ)]


def encoded_bytes(value: Any) -> int:
    """Size of ``value`` as the pydantic data converter puts it on the wire (UTF-8 JSON).

    The one size rule of every limit on a payload: counting characters of a ``str()`` (or
    ASCII-escaped JSON) disagrees with the client's byte count for non-ASCII text, and an
    event that passes one and fails the other is never delivered."""
    return len(to_json(value))


def oversized_args(name: str, args: dict[str, Any]) -> str | None:
    """Why a function call's arguments are too large to send, or None. One rule for the
    workflow (``call_function``'s validator) and the agent (a transition's signal), so the
    LLM hears the same refusal whichever side would have to send them."""
    if args and (size := encoded_bytes(args)) > MAX_ARGS_BYTES:
        return (
            f"the arguments of '{name}' are larger than {MAX_ARGS_BYTES} bytes ({size} bytes "
            "encoded); call it again with shorter values"
        )
    return None


class Message(BaseModel):
    """What is sent (signals, update requests, the call's input): unknown fields refused."""

    model_config = ConfigDict(extra="forbid")


class Answer(BaseModel):
    """What the workflow answers (update results, query answers). Read tolerantly, unknown
    fields ignored: agents and workers roll out separately, and an agent must read the
    answers of a worker one release older or newer than itself."""

    model_config = ConfigDict(extra="ignore")
