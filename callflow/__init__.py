"""The pure domain of Ringflow: the flow format, its validation and the call engine.

The names below are imported on first use: importing a submodule (``callflow.handler_api``
for a handler, ``callflow.errors``) does not load the loader and its pydantic models, so
``ringflow --help`` starts without them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ringflow.callflow.errors import FlowError, Issue
    from ringflow.callflow.loader import ValidationReport, load_flow, validate_data, validate_file
    from ringflow.callflow.model import Flow, FlowDefinition

_HOMES = {
    "Flow": "model",
    "FlowDefinition": "model",
    "FlowError": "errors",
    "Issue": "errors",
    "ValidationReport": "loader",
    "load_flow": "loader",
    "validate_data": "loader",
    "validate_file": "loader",
}
__all__ = [
    "Flow",
    "FlowDefinition",
    "FlowError",
    "Issue",
    "ValidationReport",
    "load_flow",
    "validate_data",
    "validate_file",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'callflow' has no attribute {name!r}")
    return getattr(importlib.import_module(f"callflow.{home}"), name)
