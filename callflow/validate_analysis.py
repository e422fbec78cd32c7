"""Validation rules for a flow's ``analysis`` block: something to analyse, and custom fields
the answer's JSON schema can hold."""

from __future__ import annotations

from ringflow.callflow.model import Flow
from ringflow.callflow.validate_checker import Checker


def check_analysis(checker: Checker, flow: Flow) -> None:
    spec = flow.analysis
    if spec is None:
        return
    if not (spec.summary or spec.success or spec.sentiment or spec.fields):
        checker.warn("analysis", "asks for nothing: add summary, success, sentiment or fields")
    seen: set[str] = set()
    for i, field in enumerate(spec.fields):
        if field.name in seen:
            checker.err(f"analysis.fields[{i}].name", f"duplicate field name '{field.name}'")
        seen.add(field.name)
        if field.enum is not None and not field.enum:
            checker.err(f"analysis.fields[{i}].enum", "an enum lists at least one value")
