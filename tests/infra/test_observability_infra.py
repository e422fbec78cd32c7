"""The Grafana dashboard and the Prometheus alert rules load in their tools' validators.

``promtool check rules`` (Debian's ``prometheus`` package) checks the alert rules and, as
recording rules, every dashboard query's PromQL; without promtool those checks skip and
the schema checks below still run. Which series the expressions may name is checked
against live scrapes in ``tests/ringflow/test_metrics.py``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.support.promql import (
    INFRA,
    RULES,
    alert_expressions,
    dashboard,
    dashboard_expressions,
    rules,
    series_in,
)

DURATION = r"^[0-9]+(ms|s|m|h|d|w|y)$"

RULES_SCHEMA: dict[str, Any] = {  # Prometheus' rule file format, the alerting part
    "type": "object",
    "required": ["groups"],
    "additionalProperties": False,
    "properties": {
        "groups": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["name", "rules"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "interval": {"type": "string", "pattern": DURATION},
                    "rules": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["alert", "expr"],
                            "additionalProperties": False,
                            "properties": {
                                "alert": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                                "expr": {"type": "string", "minLength": 1},
                                "for": {"type": "string", "pattern": DURATION},
                                "keep_firing_for": {"type": "string", "pattern": DURATION},
                                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                                "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                            },
                        },
                    },
                },
            },
        }
    },
}

TARGET = {
    "type": "object",
    "required": ["expr", "refId"],
    "properties": {
        "expr": {"type": "string", "minLength": 1},
        "refId": {"type": "string"},
        "legendFormat": {"type": "string"},
        "datasource": {"$ref": "#/$defs/datasource"},
    },
}
DASHBOARD_SCHEMA: dict[str, Any] = {  # the parts of Grafana's dashboard model this file uses
    "type": "object",
    "required": ["uid", "title", "schemaVersion", "panels", "templating", "time"],
    "$defs": {
        "datasource": {
            "type": "object",
            "required": ["type", "uid"],
            "properties": {"type": {"const": "prometheus"}, "uid": {"type": "string"}},
        }
    },
    "properties": {
        "uid": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,40}$"},
        "title": {"type": "string", "minLength": 1},
        "schemaVersion": {"type": "integer", "minimum": 36},
        "time": {"type": "object", "required": ["from", "to"]},
        "templating": {"type": "object", "required": ["list"]},
        "panels": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["id", "type", "title", "gridPos", "targets", "datasource"],
                "properties": {
                    "id": {"type": "integer", "minimum": 1},
                    "type": {"enum": ["timeseries", "stat", "gauge", "bargauge", "table", "heatmap"]},
                    "title": {"type": "string", "minLength": 1},
                    "datasource": {"$ref": "#/$defs/datasource"},
                    "gridPos": {
                        "type": "object",
                        "required": ["h", "w", "x", "y"],
                        "properties": {
                            "w": {"type": "integer", "minimum": 1, "maximum": 24},
                            "x": {"type": "integer", "minimum": 0, "maximum": 23},
                            "h": {"type": "integer", "minimum": 1},
                            "y": {"type": "integer", "minimum": 0},
                        },
                    },
                    "targets": {"type": "array", "minItems": 1, "items": TARGET},
                },
            },
        },
    },
}


def test_series_in_finds_metric_names_only() -> None:
    expr = (
        'sum by (le, kind) (rate(a_bucket{end_reason="x y"}[$__rate_interval])) '
        "/ clamp_min(sum(b_total), 1e-9) > 0.02 and on (job) c"
    )
    assert series_in(expr) == {"a_bucket", "b_total", "c"}


def test_alert_rules_match_the_rule_file_schema_and_cover_the_issue() -> None:
    jsonschema.validate(rules(), RULES_SCHEMA)
    exprs = alert_expressions()
    assert any("ringflow_signal_lag_seconds" in e for e in exprs.values())
    assert any("ringflow_agent_outbox_oldest_pending_seconds" in e for e in exprs.values())
    assert any('end_reason="agent_lost"' in e for e in exprs.values())
    assert any('end_reason="error"' in e for e in exprs.values())
    assert any("temporal_workflow_task_execution_failed_total" in e for e in exprs.values())
    for rule in (r for g in rules()["groups"] for r in g["rules"]):
        assert rule["annotations"].get("summary"), f"{rule['alert']} needs a summary"


def test_alerts_cover_temporals_worker_minimum_and_every_component() -> None:
    """Temporal's recommended worker alerts (schedule-to-start latency of workflow and
    activity tasks, slots exhausted, poll failures), `up`/absent for every component the
    Kubernetes base runs, and the webhook receiver's verification failures and latency."""
    exprs = " ".join(alert_expressions().values())
    for series in (
        "temporal_workflow_task_schedule_to_start_latency_bucket",
        "temporal_activity_schedule_to_start_latency_bucket",
        "temporal_worker_task_slots_available",
        "temporal_long_request_failure_total",
        'ringflow_webhooks_received_total{outcome="unverified"}',
        "ringflow_webhook_seconds_bucket",
    ):
        assert series in exprs, f"no alert on {series}"
    components = [
        d["metadata"]["name"]
        for f in (INFRA / "k8s" / "base").glob("*.yaml")
        for d in yaml.safe_load_all(f.read_text())
        if d and d["kind"] == "Deployment"
    ]
    assert len(components) >= 4
    for name in components:
        assert f'absent(up{{namespace="ringflow", pod=~"{name}-.+"}} == 1)' in exprs, (
            f"no absent alert for {name}"
        )
        assert name.removeprefix("ringflow-") in exprs.split("RingflowComponentDown")[0] or re.search(
            r"up\{[^}]*" + re.escape(name.removeprefix("ringflow-")), exprs
        ), name


def test_dashboard_matches_grafanas_model() -> None:
    dash = dashboard()
    jsonschema.validate(dash, DASHBOARD_SCHEMA)
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in dash["panels"]:
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), f"{panel['title']}: refIds must be unique"
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
    assert [v["name"] for v in dash["templating"]["list"]] == ["datasource", "namespace", "pod"]
    pods = dash["templating"]["list"][2]
    assert pods["multi"] and pods["includeAll"], "one pod, several, or all"
    for where, expr in dashboard_expressions().items():  # every series scoped to the chosen ones
        for selector in re.findall(r"\b(?:ringflow|temporal)_[a-z_]+(\{[^}]*\})?", expr):
            assert 'namespace="$namespace"' in selector and 'pod=~"$pod"' in selector, (where, expr)
    titles = " ".join(p["title"].lower() for p in dash["panels"])
    for topic in ("calls", "transitions", "function", "signal lag", "outbox", "workflow task latency"):
        assert topic in titles, topic


PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt: prometheus)")


@needs_promtool
def test_promtool_accepts_the_alert_rules() -> None:
    out = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


@needs_promtool
def test_promtool_parses_every_dashboard_query(tmp_path: Path) -> None:
    recorded = [
        {"record": f"ringflow:dashboard_query_{n}:check", "expr": expr.replace("$__rate_interval", "5m")}
        for n, expr in enumerate(dashboard_expressions().values())
    ]
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": recorded}]}))
    out = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_kubernetes_scrapes_the_agent_and_the_worker_where_they_serve() -> None:
    base = INFRA / "k8s" / "base"
    config = yaml.safe_load((base / "config.yaml").read_text())["data"]
    for name, setting in (("agent", "RINGFLOW_AGENT_METRICS_PORT"), ("worker", "RINGFLOW_METRICS_PORT")):
        [deploy] = [
            d
            for d in yaml.safe_load_all((base / f"{name}.yaml").read_text())
            if d and d["kind"] == "Deployment"
        ]
        pod = deploy["spec"]["template"]
        ports = {p["name"]: p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
        annotated = int(pod["metadata"]["annotations"]["prometheus.io/port"])
        assert ports["metrics"] == int(config[setting]) == annotated, name
    podmonitors = INFRA / "k8s" / "components" / "monitoring" / "podmonitor.yaml"
    monitors = list(yaml.safe_load_all(podmonitors.read_text()))
    assert {m["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] for m in monitors} == {
        "ringflow-agent",
        "ringflow-worker",
        "ringflow-webhooks",
        "ringflow-codec-server",
    }
