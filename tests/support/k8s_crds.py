"""JSON schemas for the custom resources Ringflow's manifests use, for offline validation.

``kubernetes-validate`` knows only the built-in kinds. These schemas are written from
KEDA's published ScaledObject/TriggerAuthentication CRD fields (keda.sh/v1alpha1, KEDA
>= 2.17, the first release with the ``temporal`` scaler) and the Prometheus Operator's
PodMonitor (monitoring.coreos.com/v1), restricted to the fields that exist there, with
unknown fields refused, so a misspelt or invented field fails here rather than in a
cluster. The ``temporal`` trigger's metadata keys are those KEDA's temporal scaler parses.
"""

from __future__ import annotations

from typing import Any

_INT = {"type": "integer"}
_STR = {"type": "string"}
_STR_MAP = {"type": "object", "additionalProperties": {"type": "string"}}


def _obj(props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(required), "additionalProperties": False}


_METADATA = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": _STR, "namespace": _STR, "labels": _STR_MAP, "annotations": _STR_MAP},
}

# HPA behavior is validated separately against Kubernetes' own HorizontalPodAutoscalerBehavior.
_SCALED_OBJECT_SPEC = _obj(
    {
        "scaleTargetRef": _obj(
            {"apiVersion": _STR, "kind": _STR, "name": _STR, "envSourceContainerName": _STR}, ("name",)
        ),
        "pollingInterval": _INT,
        "cooldownPeriod": _INT,
        "initialCooldownPeriod": _INT,
        "idleReplicaCount": _INT,
        "minReplicaCount": _INT,
        "maxReplicaCount": _INT,
        "fallback": _obj(
            {"failureThreshold": _INT, "replicas": _INT, "behavior": _STR}, ("failureThreshold", "replicas")
        ),
        "advanced": _obj(
            {
                "restoreToOriginalReplicaCount": {"type": "boolean"},
                "horizontalPodAutoscalerConfig": _obj({"name": _STR, "behavior": {"type": "object"}}),
                "scalingModifiers": _obj(
                    {"formula": _STR, "target": _STR, "activationTarget": _STR, "metricType": _STR}
                ),
            }
        ),
        "triggers": {
            "type": "array",
            "minItems": 1,
            "items": _obj(
                {
                    "type": _STR,
                    "name": _STR,
                    "metadata": _STR_MAP,
                    "useCachedMetrics": {"type": "boolean"},
                    "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                    "authenticationRef": _obj(
                        {
                            "name": _STR,
                            "kind": {"enum": ["TriggerAuthentication", "ClusterTriggerAuthentication"]},
                        },
                        ("name",),
                    ),
                },
                ("type", "metadata"),
            ),
        },
    },
    ("scaleTargetRef", "triggers"),
)

_SECRET_TARGET = _obj({"parameter": _STR, "name": _STR, "key": _STR}, ("parameter", "name", "key"))
_TRIGGER_AUTH_SPEC = _obj(
    {
        "secretTargetRef": {"type": "array", "items": _SECRET_TARGET},
        "env": {
            "type": "array",
            "items": _obj({"parameter": _STR, "name": _STR, "containerName": _STR}, ("parameter", "name")),
        },
        "podIdentity": {"type": "object"},
        "hashiCorpVault": {"type": "object"},
        "azureKeyVault": {"type": "object"},
        "awsSecretManager": {"type": "object"},
        "gcpSecretManager": {"type": "object"},
        "configMapTargetRef": {"type": "array", "items": _SECRET_TARGET},
    }
)

_POD_MONITOR_SPEC = _obj(
    {
        "selector": {"type": "object"},
        "namespaceSelector": {"type": "object"},
        "jobLabel": _STR,
        "podTargetLabels": {"type": "array", "items": _STR},
        "podMetricsEndpoints": {
            "type": "array",
            "minItems": 1,
            "items": _obj(
                {
                    "port": _STR,
                    "portNumber": _INT,
                    "path": _STR,
                    "scheme": {"enum": ["http", "https"]},
                    "interval": _STR,
                    "scrapeTimeout": _STR,
                    "honorLabels": {"type": "boolean"},
                    "relabelings": {"type": "array"},
                    "metricRelabelings": {"type": "array"},
                }
            ),
        },
    },
    ("selector", "podMetricsEndpoints"),
)


def _resource(api_version: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return _obj(
        {"apiVersion": {"const": api_version}, "kind": {"const": kind}, "metadata": _METADATA, "spec": spec},
        ("apiVersion", "kind", "metadata", "spec"),
    )


CRD_SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    ("keda.sh/v1alpha1", "ScaledObject"): _resource("keda.sh/v1alpha1", "ScaledObject", _SCALED_OBJECT_SPEC),
    ("keda.sh/v1alpha1", "TriggerAuthentication"): _resource(
        "keda.sh/v1alpha1", "TriggerAuthentication", _TRIGGER_AUTH_SPEC
    ),
    ("monitoring.coreos.com/v1", "PodMonitor"): _resource(
        "monitoring.coreos.com/v1", "PodMonitor", _POD_MONITOR_SPEC
    ),
}

# KEDA's temporal scaler: trigger metadata keys (``<key>FromEnv`` reads a container variable
# for the keys KEDA resolves from the environment) and what goes in a TriggerAuthentication.
TEMPORAL_METADATA = {
    "endpoint",
    "namespace",
    "activationTargetQueueSize",
    "targetQueueSize",
    "taskQueue",
    "queueTypes",
    "buildId",
    "workerDeploymentName",
    "workerDeploymentBuildId",
    "selectAllActive",
    "selectUnversioned",
    "minConnectTimeout",
    "unsafeSsl",
    "tlsServerName",
}
TEMPORAL_FROM_ENV = {
    "endpoint",
    "namespace",
    "taskQueue",
    "buildId",
    "workerDeploymentName",
    "workerDeploymentBuildId",
}
TEMPORAL_AUTH_PARAMS = {"apiKey", "cert", "key", "keyPassword", "ca"}
TEMPORAL_QUEUE_TYPES = {"workflow", "activity", "nexus"}
CPU_METADATA = {"value", "containerName"}
# KEDA's prometheus scaler metadata (pkg/scalers/prometheus_scaler.go, KEDA >= 2.17).
PROMETHEUS_METADATA = {
    "serverAddress",
    "query",
    "queryParameters",
    "threshold",
    "activationThreshold",
    "namespace",
    "customHeaders",
    "ignoreNullValues",
    "unsafeSsl",
    "timeout",
}
