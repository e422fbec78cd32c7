"""The pure domain of Ringflow: the flow format, its validation and the call engine."""

from ringflow.callflow.errors import FlowError, Issue
from ringflow.callflow.loader import ValidationReport, load_flow, validate_data, validate_file
from ringflow.callflow.model import Flow, FlowDefinition

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
