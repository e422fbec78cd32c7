"""What the rule modules (``validate_jobs.py``, ``validate_mcp.py``) use of the validator
(``validate.py``), which calls them: a Protocol, so the import runs one way."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any, Protocol

from ringflow.callflow.model import Flow, HandlerSpec, Transition


class Checker(Protocol):
    flow: Flow

    def err(self, path: str, msg: str) -> None: ...
    def warn(self, path: str, msg: str) -> None: ...
    def check_template(
        self, path: str, text: str | None, extra: AbstractSet[str] = frozenset(), url: bool = False
    ) -> None: ...
    def check_transition(self, path: str, t: Transition | None) -> None: ...
    def check_parameters(self, path: str, params: dict[str, Any] | None, required: bool) -> None: ...
    def handler(self, path: str, name: str, no_args: bool = False) -> HandlerSpec | None: ...
