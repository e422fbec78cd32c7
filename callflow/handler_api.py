"""The API a flow's handler module is written against.

It mirrors Pipecat Flows' declarative handlers so that handler code moves between the
two without edits. It lives in the pure domain (no I/O) because both the validator
(which reads handler signatures) and the activity that runs handlers need it; the
public import path is ``ringflow``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar


class _Marker:
    """A named sentinel: prints readably in logs and compares by identity."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name

    def __reduce__(self) -> str:
        return self._name


TRANSITION_IN_YAML: Final = _Marker("TRANSITION_IN_YAML")
"""Second slot of a handler's return: let the flow file decide where the call goes."""

NO_RESPONSE: Final = _Marker("NO_RESPONSE")
"""Second slot of a handler's return: the result is recorded, the bot stays silent."""


@dataclass
class FlowManager:
    """What a handler sees of the call.

    ``state`` is the call's durable scratch space: whatever a handler writes there is
    returned to the workflow and survives crashes and later nodes.
    """

    call_id: str = ""
    node: str = ""
    variables: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    # ``<call id>:<event>``: the same across retries of one run, for the handler's back end
    idempotency_key: str = ""
    # set in a background job (a ``jobs:`` group): where ``update`` sends progress
    progress: Callable[[Any], Awaitable[None]] | None = field(default=None, repr=False, compare=False)

    async def update(self, data: Any) -> None:
        """Report a background job's progress and partial data (a ``job_update`` the LLM,
        the transcript and the room get). Outside a job it does nothing."""
        if self.progress is not None:
            await self.progress(data)


@dataclass(frozen=True)
class FunctionOptions:
    """Per-handler options; the flow file's own keys win where both are given."""

    cancel_on_interruption: bool | None = None
    timeout_s: float | None = None


F = TypeVar("F", bound=Callable[..., Any])

OPTIONS_ATTR: Final = "__ringflow_options__"


def function_options(
    *, cancel_on_interruption: bool | None = None, timeout_s: float | None = None
) -> Callable[[F], F]:
    """Attach execution options to a handler without wrapping it.

    The function itself is returned untouched so that its signature and docstring,
    from which the tool schema is derived, stay visible to the validator.
    """
    if timeout_s is not None and timeout_s <= 0:
        raise ValueError("timeout_s must be positive")

    def mark(fn: F) -> F:
        setattr(fn, OPTIONS_ATTR, FunctionOptions(cancel_on_interruption, timeout_s))
        return fn

    return mark


def options_of(fn: Callable[..., Any]) -> FunctionOptions:
    return getattr(fn, OPTIONS_ATTR, FunctionOptions())
