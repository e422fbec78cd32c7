"""Byte budgets for what a call hands on and writes out: continue-as-new input, records,
transcript slices.

Temporal refuses a payload over 2 MB (and warns past 512 KB), and a refused command fails
the workflow task again and again. Counting events or turns does not bound bytes (one turn
may be 16,000 emoji), so everything a run hands on or writes out is cut by its encoded
size here, well under the limit, and the transcript goes to the database in slices.
Pure functions of their inputs: deterministic in workflow code.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

from ringflow.contract.events import Turn
from ringflow.contract.records import TranscriptItem
from ringflow.contract.updates import CallFunctionResult
from ringflow.contract.wire import encoded_bytes

TAIL_MAX_TURNS = 50  # turns a run keeps in memory across continue-as-new (for attach, extraction)
TAIL_MAX_BYTES = 256 * 1024
MEMORY_MAX_BYTES = 1024 * 1024  # past this much transcript in memory, continue-as-new
SLICE_MAX_BYTES = 512 * 1024  # one append_transcript activity input
RECORD_MAX_BYTES = 512 * 1024  # a record carries its transcript inline only under this
CONTINUE_MAX_BYTES = 1536 * 1024  # the whole continue-as-new input, definition included
FN_MAX_BYTES = 256 * 1024  # remembered function results carried across continue-as-new
FN_MAX = 200

T = TypeVar("T")


def turn_bytes(turn: Turn) -> int:
    """A turn's weight: its text as UTF-8 plus room for the other fields. Cheaper than
    encoding it, and an upper bound of what the text adds to a payload."""
    return len(turn.text.encode()) + 160


def tail_start(turns: Sequence[Turn]) -> int:
    """Where the carried tail begins: the newest turns, at most ``TAIL_MAX_TURNS`` and
    ``TAIL_MAX_BYTES``; everything before goes to the database first."""
    start, size = len(turns), 0
    while start > 0 and len(turns) - start < TAIL_MAX_TURNS:
        size += turn_bytes(turns[start - 1])
        if size > TAIL_MAX_BYTES:
            break
        start -= 1
    return start


def slices(items: Sequence[TranscriptItem], limit: int = SLICE_MAX_BYTES) -> Iterator[list[TranscriptItem]]:
    """Consecutive runs of ``items`` each encoding under ``limit`` bytes (an item is at
    most one turn of ``MAX_TEXT_CHARS``, far under the limit, so every item fits)."""
    chunk: list[TranscriptItem] = []
    size = 0
    for item in items:
        n = encoded_bytes(item) + 1
        if chunk and size + n > limit:
            yield chunk
            chunk, size = [], 0
        chunk.append(item)
        size += n
    if chunk:
        yield chunk


def kept_results(
    results: dict[str, CallFunctionResult], done: Sequence[str]
) -> tuple[dict[str, CallFunctionResult], list[str]]:
    """The function results the next run remembers, newest first within ``FN_MAX_BYTES``
    (without the call state each holds: the next run has its own); older ids are kept
    as ids only, so a repeated call is still answered, never run again."""
    kept: dict[str, CallFunctionResult] = {}
    ids: list[str] = list(done)
    size = 0
    for event_id in reversed(list(results)):
        compact = results[event_id].model_copy(update={"state": None})
        n = encoded_bytes(compact) + len(event_id)
        if size + n <= FN_MAX_BYTES and len(kept) < FN_MAX:
            kept[event_id] = compact
            size += n
        else:
            ids.append(event_id)
    ordered = dict(reversed(list(kept.items())))
    return ordered, ids[-FN_MAX * 5 :]


def already_ran(node: str | None) -> CallFunctionResult:
    """The answer to a function call that ran in an earlier run whose result was too large
    to keep: it is not run again, and the LLM is told so."""
    return CallFunctionResult(
        result={"status": "done", "note": "this call already ran; its result is no longer available"},
        decision="stay",
        node=node,
    )
