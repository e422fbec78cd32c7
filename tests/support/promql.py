"""The alert rules and the dashboard as data, and the metric names a PromQL expression
selects: what the infra tests validate and the metrics test checks against live scrapes."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from tests.support.paths import ROOT

INFRA = ROOT / "infra"
RULES = INFRA / "prometheus" / "ringflow-alerts.yaml"
DASHBOARD = INFRA / "grafana" / "ringflow-dashboard.json"

PROMQL_WORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "inf",
    "nan",
}


def rules() -> dict[str, Any]:
    return yaml.safe_load(RULES.read_text())


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def alert_expressions() -> dict[str, str]:
    return {r["alert"]: r["expr"] for g in rules()["groups"] for r in g["rules"]}


def dashboard_expressions() -> dict[str, str]:
    return {f"{p['title']} / {t['refId']}": t["expr"] for p in dashboard()["panels"] for t in p["targets"]}


def series_in(expr: str) -> set[str]:
    """The metric names an expression selects (not functions, labels, keywords or numbers)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", "", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)  # ranges, $__rate_interval
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    e = re.sub(r"(?<![\w:])\d+(\.\d+)?([eE][+-]?\d+)?", "0", e)
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", e):
        if e[m.end() :].lstrip().startswith("(") or m.group(0).lower() in PROMQL_WORDS:
            continue  # a function call or a keyword
        names.add(m.group(0))
    return names
