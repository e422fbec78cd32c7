"""``infra/k8s``: every overlay renders with ``kubectl kustomize`` and every object validates.

Built-in kinds are checked offline against the Kubernetes schemas of ``kubernetes-validate``
(strict: unknown fields fail); KEDA and Prometheus Operator objects against the CRD fields
in ``tests/support/k8s_crds.py``. Then what the schemas cannot know: the commands exist in the CLI,
the ``RINGFLOW_*`` variables exist in the settings, grace periods outlast the drains, one
namespace, probes on every container, the autoscaler each overlay promises.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from typer.testing import CliRunner

from ringflow.cli import app
from ringflow.settings import Settings
from tests.support.k8s_crds import (
    CPU_METADATA,
    CRD_SCHEMAS,
    TEMPORAL_AUTH_PARAMS,
    TEMPORAL_FROM_ENV,
    TEMPORAL_METADATA,
    TEMPORAL_QUEUE_TYPES,
)
from tests.support.paths import ROOT

K8S = ROOT / "infra" / "k8s"
OVERLAYS = sorted(p.name for p in (K8S / "overlays").iterdir() if (p / "kustomization.yaml").exists())
# Kubernetes versions the manifests must be valid for: the oldest still commonly run, and the newest.
K8S_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
# Renders that add an optional component to production (Temporal Cloud API key, mTLS).
VARIANTS = [(o, None) for o in OVERLAYS] + [("production", c) for c in ("temporal-api-key", "temporal-mtls")]


def _kubectl() -> str:
    found = shutil.which("kubectl")
    if found is None:
        pytest.fail(
            "kubectl is not on PATH: it renders infra/k8s (`kubectl kustomize`). Install it "
            "(e.g. `apt-get install kubectl` from the Kubernetes apt repository, or any "
            "kubectl >= 1.27) and run the tests again."
        )
    return found


@cache
def render(overlay: str, component: str | None, tmp: str) -> tuple[dict[str, Any], ...]:
    target = K8S / "overlays" / overlay
    if component is not None:  # a throwaway kustomization: the overlay plus one component
        folder = Path(tmp) / f"{overlay}-{component}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "kustomization.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kustomize.config.k8s.io/v1beta1",
                    "kind": "Kustomization",
                    "resources": [os.path.relpath(target, folder)],
                    "components": [os.path.relpath(K8S / "components" / component, folder)],
                }
            )
        )
        target = folder
    proc = subprocess.run([_kubectl(), "kustomize", str(target)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"kubectl kustomize {target} failed:\n{proc.stderr}"
    docs = tuple(d for d in yaml.safe_load_all(proc.stdout) if d)
    assert docs, f"{target} rendered nothing"
    return docs


@pytest.fixture(params=VARIANTS, ids=[f"{o}+{c}" if c else o for o, c in VARIANTS])
def objects(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    overlay, component = request.param
    return list(render(overlay, component, str(tmp_path_factory.getbasetemp() / "kustomize")))


def _name(obj: dict[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


def _by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def _deployed_settings(objects: list[dict[str, Any]]) -> dict[str, str]:
    """The ConfigMaps' RINGFLOW_* values by Settings field name."""
    return {
        key.removeprefix("RINGFLOW_").lower(): value
        for cm in _by_kind(objects, "ConfigMap").values()
        for key, value in cm["data"].items()
        if key.startswith("RINGFLOW_")
    }


def test_every_object_validates_against_its_schema(objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        crd = CRD_SCHEMAS.get((obj["apiVersion"], obj["kind"]))
        if crd is not None:
            jsonschema.validate(obj, crd)
            continue
        for version in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as err:
                pytest.fail(
                    f"{_name(obj)} is invalid for Kubernetes {version}: {err.message} at "
                    f"{'.'.join(str(p) for p in err.path)}"
                )
            except kubernetes_validate.SchemaNotFoundError:
                pytest.fail(
                    f"{_name(obj)}: no schema for {obj['apiVersion']} {obj['kind']} (add it to "
                    "tests/support/k8s_crds.py if it is a CRD)"
                )


def test_keda_objects_use_only_what_keda_reads(objects: list[dict[str, Any]]) -> None:
    deployments = _by_kind(objects, "Deployment")
    auths = _by_kind(objects, "TriggerAuthentication")
    for so in _by_kind(objects, "ScaledObject").values():
        spec = so["spec"]
        target = deployments.get(spec["scaleTargetRef"]["name"])
        assert target is not None, f"{_name(so)} scales a Deployment that is not in the render"
        assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"], "never scale workers to zero"
        # KEDA's behavior block is Kubernetes' HPA behavior: validate it as one.
        behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(
                {
                    "apiVersion": "autoscaling/v2",
                    "kind": "HorizontalPodAutoscaler",
                    "metadata": {"name": "x"},
                    "spec": {
                        "scaleTargetRef": {"kind": "Deployment", "name": "x"},
                        "maxReplicas": 2,
                        "behavior": behavior,
                    },
                },
                version,
                strict=True,
            )
        assert behavior["scaleDown"]["stabilizationWindowSeconds"] >= 300, "scale-down must not thrash"
        env = _container_env(target, objects)
        for trigger in spec["triggers"]:
            meta = trigger["metadata"]
            if trigger["type"] == "cpu":
                assert set(meta) <= CPU_METADATA and trigger.get("metricType") == "Utilization"
                continue
            assert trigger["type"] == "temporal", trigger["type"]
            for key, value in meta.items():
                base = key.removesuffix("FromEnv")
                if key != base:
                    assert base in TEMPORAL_FROM_ENV, f"KEDA cannot read {base} from the environment"
                    assert value in env, f"{key}: {value} is not set on {_name(target)}"
                else:
                    assert key in TEMPORAL_METADATA, f"the temporal scaler has no {key!r}"
            assert {"endpoint", "taskQueue"} <= {k.removesuffix("FromEnv") for k in meta}
            assert set(meta.get("queueTypes", "workflow").split(",")) <= TEMPORAL_QUEUE_TYPES
            assert int(meta["targetQueueSize"]) > 0
            ref = trigger.get("authenticationRef")
            if ref is not None:
                auth = auths[ref["name"]]
                params = {t["parameter"] for t in auth["spec"]["secretTargetRef"]}
                assert params <= TEMPORAL_AUTH_PARAMS, params
                assert params in ({"apiKey"}, {"ca", "cert", "key"}), params


def _container_env(deployment: dict[str, Any], objects: list[dict[str, Any]]) -> dict[str, str]:
    """The first container's environment as far as the render knows it (ConfigMaps; Secrets
    are created by the operator, so their keys count as present but unknown)."""
    maps = _by_kind(objects, "ConfigMap")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(maps[source["configMapRef"]["name"]]["data"])
    for var in container.get("env", []):
        env[var["name"]] = var.get("value", "")
    return env


def test_one_namespace_probes_and_non_root(objects: list[dict[str, Any]]) -> None:
    namespaces = {o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"}
    assert namespaces == {"ringflow"}
    for obj in objects:
        if obj["kind"] != "Namespace":
            assert obj["metadata"].get("namespace") == "ringflow", f"{_name(obj)} is not in ringflow"
    for obj in [*_by_kind(objects, "Deployment").values(), *_by_kind(objects, "Job").values()]:
        pod = obj["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, _name(obj)
        for c in pod["containers"]:
            assert c["securityContext"]["allowPrivilegeEscalation"] is False, _name(obj)
            assert ":" in c["image"] and not c["image"].endswith(":latest"), f"{_name(obj)}: pin the image"
            if obj["kind"] == "Deployment":
                assert "readinessProbe" in c and "livenessProbe" in c, f"{_name(obj)} needs probes"
                for probe in (c["readinessProbe"], c["livenessProbe"]):
                    assert probe.get("httpGet", {}).get("path") != "/metrics", "metrics prove nothing"
            assert "memory" in c["resources"]["limits"], _name(obj)


def test_commands_and_settings_exist(objects: list[dict[str, Any]]) -> None:
    runner = CliRunner()
    for obj in [*_by_kind(objects, "Deployment").values(), *_by_kind(objects, "Job").values()]:
        args = obj["spec"]["template"]["spec"]["containers"][0]["args"]
        result = runner.invoke(app, [*args, "--help"])
        assert result.exit_code == 0, (
            f"{_name(obj)}: `ringflow {' '.join(args)}` is not a command: {result.output}"
        )
        for opt in (a for a in args if a.startswith("--")):
            assert opt in result.output, f"{_name(obj)}: `ringflow {args[0]}` has no {opt}"
    fields = set(Settings.model_fields)
    for name, value in _deployed_settings(objects).items():
        assert name in fields, f"RINGFLOW_{name.upper()} is not a Ringflow setting"
        Settings(**{name: value})  # and its value is valid for it


def test_deployed_agents_heartbeat_as_the_webhook_receiver_allows(objects: list[dict[str, Any]]) -> None:
    """Every overlay runs ringflow-webhooks, so LiveKit reports a lost agent at once: the
    heartbeat is the slow backstop the capacity was measured with (20 s, calls timing out
    after 60 s), not the 5 s a deployment without webhooks needs."""
    assert "ringflow-webhooks" in _by_kind(objects, "Deployment")
    settings = Settings(**_deployed_settings(objects))
    assert settings.heartbeat_s == 20.0
    assert settings.call_agent_timeout_s == 60.0


def test_grace_periods_outlast_the_drains(objects: list[dict[str, Any]]) -> None:
    deployments = _by_kind(objects, "Deployment")
    worker, agent = deployments["ringflow-worker"], deployments["ringflow-agent"]
    w_env, a_env = _container_env(worker, objects), _container_env(agent, objects)
    assert w_env["RINGFLOW_DISPATCHER"] == "livekit", "crash-resume needs the LiveKit dispatcher"
    assert (
        float(w_env["RINGFLOW_GRACEFUL_SHUTDOWN_S"]) + 5
        <= worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    )
    assert (
        float(a_env["RINGFLOW_AGENT_DRAIN_TIMEOUT_S"]) + 30
        <= agent["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    )
    assert int(w_env["RINGFLOW_HEALTH_PORT"]) == _port(worker, "health")
    assert int(a_env["RINGFLOW_AGENT_HEALTH_PORT"]) == _port(agent, "health")  # LiveKit's health server
    assert int(a_env["RINGFLOW_AGENT_METRICS_PORT"]) == _port(agent, "metrics")
    assert int(w_env["RINGFLOW_METRICS_PORT"]) == _port(worker, "metrics")
    for monitor in _by_kind(objects, "PodMonitor").values():
        target = deployments[monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"]]
        for endpoint in monitor["spec"]["podMetricsEndpoints"]:
            _port(target, endpoint["port"])  # a named port of the pods it scrapes
    assert {"ringflow-worker", "ringflow-agent", "ringflow-webhooks"} <= set(deployments)
    assert "ringflow-webhooks" in _by_kind(objects, "Service")
    pdbs = {
        p["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"]
        for p in _by_kind(objects, "PodDisruptionBudget").values()
    }
    assert {"ringflow-worker", "ringflow-agent"} <= pdbs


def _port(deployment: dict[str, Any], name: str) -> int:
    ports = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    return next(int(p["containerPort"]) for p in ports if p["name"] == name)


def test_each_overlay_scales_the_workers_as_it_says(tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = str(tmp_path_factory.getbasetemp() / "kustomize")
    assert {"dev", "production", "production-no-keda"} <= set(OVERLAYS)
    prod = list(render("production", None, tmp))
    assert "ringflow-worker" in _by_kind(prod, "ScaledObject")
    assert "ringflow-worker" not in _by_kind(prod, "HorizontalPodAutoscaler")  # KEDA owns its HPA
    assert "ringflow-worker" in _by_kind(prod, "PodMonitor")
    fallback = list(render("production-no-keda", None, tmp))
    assert not _by_kind(fallback, "ScaledObject")
    hpa = _by_kind(fallback, "HorizontalPodAutoscaler")["ringflow-worker"]
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 300
    dev = list(render("dev", None, tmp))
    assert not _by_kind(dev, "ScaledObject") and not _by_kind(dev, "PodMonitor")  # no CRDs needed
    mtls = list(render("production", "temporal-mtls", tmp))
    for obj in [*_by_kind(mtls, "Deployment").values(), *_by_kind(mtls, "Job").values()]:
        env = _container_env(obj, mtls)
        assert env["TEMPORAL_TLS_CLIENT_CERT_PATH"].startswith("/etc/temporal-tls/"), _name(obj)


def test_the_api_runs_beside_the_worker_probed_and_scaled(objects: list[dict[str, Any]]) -> None:
    """``ringflow api``: its own Deployment and Service, probed on its own health routes (not
    a bare TCP check: readiness means Temporal and the database answer), scaled by an HPA."""
    api = _by_kind(objects, "Deployment")["ringflow-api"]
    container = api["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][0] == "api"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    service = _by_kind(objects, "Service")["ringflow-api"]
    assert service["spec"]["selector"] == api["spec"]["selector"]["matchLabels"]
    hpa = _by_kind(objects, "HorizontalPodAutoscaler")["ringflow-api"]
    assert hpa["spec"]["scaleTargetRef"]["name"] == "ringflow-api"
