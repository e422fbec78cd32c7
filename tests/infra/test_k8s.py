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

from ringflow.agents.metrics import CALLS_ACTIVE
from ringflow.cli import app
from ringflow.servers.agent_probes import LOAD_THRESHOLD
from ringflow.settings import Settings
from tests.support.k8s_crds import (
    CPU_METADATA,
    CRD_SCHEMAS,
    PROMETHEUS_METADATA,
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
            if trigger["type"] == "prometheus":
                assert set(meta) <= PROMETHEUS_METADATA, set(meta) - PROMETHEUS_METADATA
                assert {"serverAddress", "query", "threshold"} <= set(meta)
                float(meta["threshold"])
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
    heartbeat is the slow backstop the capacity was measured with (60 s, calls timing out
    after 180 s), not the 5 s a deployment without webhooks needs."""
    assert "ringflow-webhooks" in _by_kind(objects, "Deployment")
    settings = Settings(**_deployed_settings(objects))
    assert settings.heartbeat_s == 60.0
    assert settings.call_agent_timeout_s == 180.0


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


# --- GitOps and a hostile network ----------------------------------------------------------


def _pods(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every workload's pod template (Deployments and Jobs) by workload name."""
    return {
        o["metadata"]["name"]: o["spec"]["template"] for o in objects if o["kind"] in ("Deployment", "Job")
    }


def _autoscaled(objects: list[dict[str, Any]]) -> set[str]:
    targets = {so["spec"]["scaleTargetRef"]["name"] for so in _by_kind(objects, "ScaledObject").values()}
    targets |= {
        h["spec"]["scaleTargetRef"]["name"] for h in _by_kind(objects, "HorizontalPodAutoscaler").values()
    }
    return targets


def test_autoscaled_deployments_leave_replicas_to_the_autoscaler(objects: list[dict[str, Any]]) -> None:
    """Argo CD and server-side apply reset a Deployment's ``spec.replicas`` to the manifest's on
    every sync: with an autoscaler that undoes its scaling (and drains the agents it removes)."""
    deployments = _by_kind(objects, "Deployment")
    scaled = _autoscaled(objects)
    for name in scaled:
        assert "replicas" not in deployments[name]["spec"], (
            f"Deployment/{name} is autoscaled: drop spec.replicas"
        )


def _argo_order(obj: dict[str, Any]) -> tuple[int, int]:
    """When Argo CD applies an object: (phase, wave); non-hooks are in the Sync phase."""
    notes = obj["metadata"].get("annotations", {})
    phases = ["PreSync", "Sync", "PostSync"]
    phase = notes.get("argocd.argoproj.io/hook", "Sync").split(",")[0]
    return phases.index(phase), int(notes.get("argocd.argoproj.io/sync-wave", "0"))


def test_the_setup_job_runs_on_a_first_install_and_again_on_the_next_apply(
    objects: list[dict[str, Any]],
) -> None:
    """The Job's ConfigMap, ServiceAccount and egress exist before it under Argo CD (a PreSync
    hook ran before its ConfigMap and waited for it forever) and under plain kubectl (render
    order), it runs before the new Deployments, and it is gone soon after it finished so the
    next ``kubectl apply -k`` creates it again rather than failing on its immutable template."""
    job = _by_kind(objects, "Job")["ringflow-temporal-setup"]
    pod = job["spec"]["template"]["spec"]
    needs = [
        _by_kind(objects, "ConfigMap")[s["configMapRef"]["name"]]
        for s in pod["containers"][0]["envFrom"]
        if "configMapRef" in s
    ]
    needs.append(_by_kind(objects, "ServiceAccount")[pod["serviceAccountName"]])
    needs += [p for p in _by_kind(objects, "NetworkPolicy").values() if _selects(p, job["spec"]["template"])]
    assert len(needs) >= 3
    for obj in needs:
        assert _argo_order(obj) < _argo_order(job), (
            f"Argo CD applies {_name(obj)} after the Job that needs it"
        )
    for dep in _by_kind(objects, "Deployment").values():
        assert _argo_order(job) < _argo_order(dep), f"{_name(dep)} starts before the namespace is set up"
    order = [id(o) for o in objects]
    for obj in needs[:2]:  # ConfigMap and ServiceAccount precede the Job in what kubectl applies
        assert order.index(id(obj)) < order.index(id(job)), _name(obj)
    assert 0 <= job["spec"]["ttlSecondsAfterFinished"] <= 60


def _selects(policy: dict[str, Any], template: dict[str, Any]) -> bool:
    wanted = policy["spec"]["podSelector"].get("matchLabels", {})
    labels = template["metadata"]["labels"]
    return all(labels.get(k) == v for k, v in wanted.items())


def test_secret_volumes_are_readable_by_the_pod_user(objects: list[dict[str, Any]]) -> None:
    """A Secret volume's files belong to root; mode 0440 is readable by the non-root user only
    when the pod's fsGroup is its group (the mTLS key was unreadable in the webhook receiver and
    the setup Job, which had no fsGroup)."""
    for name, template in _pods(objects).items():
        pod = template["spec"]
        ctx = pod["securityContext"]
        for volume in pod.get("volumes", []):
            if "secret" not in volume:
                continue
            mode = volume["secret"].get("defaultMode", 0o644)
            if mode & 0o004:
                continue  # world-readable: anyone can read it
            assert mode & 0o040, f"{name}: volume {volume['name']} mode {mode:o} has no group read"
            assert ctx.get("fsGroup") == ctx["runAsGroup"], f"{name}: cannot read volume {volume['name']}"


_SECRET_VALUES = {
    "temporal-client": {"TEMPORAL_ADDRESS": "from-secret:7233", "TEMPORAL_NAMESPACE": "from-secret"}
}


def test_the_temporal_address_in_the_secret_wins_over_the_configmap(
    objects: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator who puts TEMPORAL_ADDRESS in the ``temporal-client`` Secret reaches that
    address: every process, and KEDA's scaler reading the same container environment."""
    maps = _by_kind(objects, "ConfigMap")
    scalers = {so["spec"]["scaleTargetRef"]["name"]: so for so in _by_kind(objects, "ScaledObject").values()}
    for name, template in _pods(objects).items():
        sources = template["spec"]["containers"][0]["envFrom"]
        if not any(s.get("secretRef", {}).get("name") == "temporal-client" for s in sources):
            continue  # talks to no Temporal (the codec server)
        env: dict[str, str] = {}
        for source in sources:  # in order: later sources win
            if "configMapRef" in source:
                env.update(maps[source["configMapRef"]["name"]]["data"])
            else:
                env.update(_SECRET_VALUES.get(source["secretRef"]["name"], {}))
        for var in template["spec"]["containers"][0].get("env", []):
            env[var["name"]] = var["value"]
        for key in [k for k in os.environ if k.startswith(("RINGFLOW_", "TEMPORAL_"))]:
            monkeypatch.delenv(key)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        settings = Settings()
        assert (settings.temporal_address, settings.temporal_namespace) == (
            "from-secret:7233",
            "from-secret",
        ), name
        for trigger in scalers.get(name, {}).get("spec", {}).get("triggers", []):
            if trigger["type"] == "temporal":
                assert env[trigger["metadata"]["endpointFromEnv"]] == "from-secret:7233"
                assert env[trigger["metadata"]["namespaceFromEnv"]] == "from-secret"


def _floor(path: Path) -> tuple[int, ...]:
    import re

    found = re.search(r"KEDA >= (\d+)\.(\d+)\.(\d+)", path.read_text())
    assert found, f"{path.relative_to(ROOT)} states no KEDA version (KEDA >= X.Y.Z)"
    return tuple(int(g) for g in found.groups())


def test_the_keda_floor_is_where_api_key_tls_works() -> None:
    """KEDA's temporal scaler first shipped in 2.17.0 but connected without TLS when given an
    API key until 2.17.2 (kedacore/keda#6707, #6781): the API-key component must say so."""
    assert _floor(K8S / "components" / "temporal-api-key" / "kustomization.yaml") >= (2, 17, 2)
    assert _floor(K8S / "components" / "keda" / "kustomization.yaml") >= (2, 17, 0)


def _allowed_ports(policy: dict[str, Any], direction: str) -> set[tuple[str, int]]:
    return {
        (p.get("protocol", "TCP"), int(p["port"]))
        for rule in policy["spec"].get(direction, [])
        for p in rule.get("ports", [])
    }


def test_network_policies_deny_by_default_and_name_each_components_traffic(
    objects: list[dict[str, Any]],
) -> None:
    policies = _by_kind(objects, "NetworkPolicy")
    deny = [
        p
        for p in policies.values()
        if p["spec"]["podSelector"] == {}
        and set(p["spec"]["policyTypes"]) == {"Ingress", "Egress"}
        and not p["spec"].get("ingress")
        and not p["spec"].get("egress")
    ]
    assert deny, "no default-deny NetworkPolicy (podSelector {}, Ingress and Egress, no rules)"
    services = _by_kind(objects, "Service")
    monitors = _by_kind(objects, "PodMonitor")
    for name, template in _pods(objects).items():
        mine = [p for p in policies.values() if _selects(p, template)]
        own = [p for p in mine if p["spec"]["podSelector"] != {}]
        assert own, f"{name} has no NetworkPolicy of its own"
        ingress = set().union(*(_allowed_ports(p, "ingress") for p in mine))
        egress = set().union(*(_allowed_ports(p, "egress") for p in mine))
        assert {("UDP", 53), ("TCP", 53)} <= egress, f"{name} cannot resolve names"
        if name == "ringflow-codec-server":  # payloads in, payloads out: only the IdP's JWKS
            assert egress == {("UDP", 53), ("TCP", 53), ("TCP", 443)}, egress
        else:
            assert ("TCP", 7233) in egress, f"{name} cannot reach Temporal"
        ports = {
            p["name"]: int(p["containerPort"]) for p in template["spec"]["containers"][0].get("ports", [])
        }
        served = {
            ports[str(sp["targetPort"])]
            for s in services.values()
            if all(template["metadata"]["labels"].get(k) == v for k, v in s["spec"]["selector"].items())
            for sp in s["spec"]["ports"]
        }
        served |= {
            ports[e["port"]]
            for m in monitors.values()
            if m["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == name
            for e in m["spec"]["podMetricsEndpoints"]
        }
        if template["metadata"].get("annotations", {}).get("prometheus.io/scrape") == "true":
            served.add(int(template["metadata"]["annotations"]["prometheus.io/port"]))
        for port in served:
            assert ("TCP", port) in ingress, f"{name} serves :{port} but its NetworkPolicy lets nothing in"
        assert {port for _, port in ingress} <= served, f"{name} admits traffic to ports it does not serve"
    agent = _pods(objects)["ringflow-agent"]
    agent_egress = set().union(
        *(_allowed_ports(p, "egress") for p in policies.values() if _selects(p, agent))
    )
    assert ("TCP", 5432) not in agent_egress, "the agent has no database to reach"


def test_each_component_has_its_own_service_account_without_a_token(objects: list[dict[str, Any]]) -> None:
    accounts = _by_kind(objects, "ServiceAccount")
    used: dict[str, str] = {}
    for name, template in _pods(objects).items():
        pod = template["spec"]
        account = pod.get("serviceAccountName")
        assert account in accounts, f"{name} runs as {account or 'default'}, not its own ServiceAccount"
        assert account not in used, f"{name} shares ServiceAccount {account} with {used.get(account)}"
        used[account] = name
        assert pod["automountServiceAccountToken"] is False, f"{name} mounts an API token it never uses"
        assert accounts[account]["automountServiceAccountToken"] is False, account


def test_deployments_spread_over_zones_and_nodes(objects: list[dict[str, Any]]) -> None:
    for dep in _by_kind(objects, "Deployment").values():
        labels = dep["spec"]["template"]["metadata"]["labels"]
        constraints = dep["spec"]["template"]["spec"].get("topologySpreadConstraints", [])
        keys = set()
        for c in constraints:
            assert all(labels.get(k) == v for k, v in c["labelSelector"]["matchLabels"].items()), _name(dep)
            keys.add(c["topologyKey"])
        assert {"topology.kubernetes.io/zone", "kubernetes.io/hostname"} <= keys, (
            f"{_name(dep)} is not spread"
        )


_SHARED_SECRETS = {"temporal-client", "temporal-tls"}  # the Temporal client identity (KEDA reads it too)


def _secret_table() -> dict[str, set[str]]:
    """README "Secrets you create": Secret -> the keys it lists."""
    import re

    rows = {}
    for line in (K8S / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = set(re.findall(r"`([A-Z][A-Z0-9_]+|[a-z.]+\.(?:crt|key))`", cells[1]))
    return rows


def test_one_secret_per_component_and_no_database_password_for_the_agent(
    objects: list[dict[str, Any]],
) -> None:
    """Each component reads its own Secret (plus the shared Temporal client identity), so a
    compromised agent holds only what the agent needs: never the database password."""
    owners: dict[str, str] = {}
    table = _secret_table()
    for name, template in _pods(objects).items():
        container = template["spec"]["containers"][0]
        refs = [s["secretRef"]["name"] for s in container.get("envFrom", []) if "secretRef" in s]
        refs += [v["secret"]["secretName"] for v in template["spec"].get("volumes", []) if "secret" in v]
        own = [r for r in refs if r not in _SHARED_SECRETS]
        for ref in own:
            assert owners.setdefault(ref, name) == name, f"Secret {ref} goes to {owners[ref]} and {name}"
        if name != "ringflow-temporal-setup":
            assert own == [name], f"{name} reads {own}, not one Secret named after it"
            assert name in table, f"infra/k8s/README.md does not list the {name} Secret's keys"
    assert "RINGFLOW_DATABASE_URL" in table["ringflow-worker"]
    assert table["ringflow-codec-server"] == {"RINGFLOW_CODEC_KEYS", "RINGFLOW_CODEC_SERVER_TOKEN"}
    assert "RINGFLOW_DATABASE_URL" not in table["ringflow-agent"]
    assert "LIVEKIT_API_SECRET" in table["ringflow-agent"]


def test_every_container_has_a_read_only_root_filesystem(objects: list[dict[str, Any]]) -> None:
    for name, template in _pods(objects).items():
        for c in template["spec"]["containers"]:
            assert c["securityContext"].get("readOnlyRootFilesystem") is True, f"{name}/{c['name']}"
            mounts = {m["mountPath"] for m in c.get("volumeMounts", [])}
            assert "/tmp" in mounts, f"{name}/{c['name']} has nowhere to write temporary files"


def _agent_calls_target(objects: list[dict[str, Any]]) -> float | None:
    """The calls per agent pod the overlay's autoscaler aims at, None if it has none."""
    metric = CALLS_ACTIVE._name  # what agents/metrics.py exports
    for so in _by_kind(objects, "ScaledObject").values():
        if so["spec"]["scaleTargetRef"]["name"] == "ringflow-agent":
            (trigger,) = so["spec"]["triggers"]
            assert trigger["type"] == "prometheus" and metric in trigger["metadata"]["query"]
            assert trigger.get("metricType", "AverageValue") == "AverageValue"  # per pod
            return float(trigger["metadata"]["threshold"])
    for hpa in _by_kind(objects, "HorizontalPodAutoscaler").values():
        if hpa["spec"]["scaleTargetRef"]["name"] == "ringflow-agent":
            (signal,) = hpa["spec"]["metrics"]
            assert signal["type"] == "Pods" and signal["pods"]["metric"]["name"] == metric
            return float(signal["pods"]["target"]["averageValue"])
    return None


def test_agents_scale_on_the_calls_their_livekit_load_is_made_of(objects: list[dict[str, Any]]) -> None:
    """LiveKit stops offering an agent calls when its load reaches the threshold; the load
    is its calls over RINGFLOW_AGENT_MAX_CALLS, so the autoscaler, on the same calls, must aim
    below that many per pod (it used to aim at 50 % CPU while LiveKit measured the node)."""
    settings = Settings(**_deployed_settings(objects))
    target = _agent_calls_target(objects)
    deployments = _by_kind(objects, "Deployment")
    if target is None:
        assert deployments["ringflow-agent"]["spec"]["replicas"] >= 1, "an agent with no autoscaler"
    else:
        assert 0 < target <= 0.8 * settings.agent_max_calls * LOAD_THRESHOLD, (
            target,
            settings.agent_max_calls,
        )
    probe = deployments["ringflow-agent"]["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    assert probe["httpGet"]["path"] == "/readyz", "ready means registered with LiveKit"


def test_production_overlays_scale_the_agents_on_calls(tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = str(tmp_path_factory.getbasetemp() / "kustomize")
    for overlay in ("production", "production-no-keda"):
        assert _agent_calls_target(list(render(overlay, None, tmp))) is not None, overlay


def test_the_codec_server_checks_the_uis_tokens(objects: list[dict[str, Any]]) -> None:
    """The production UI sends its users' OIDC tokens: the deployed codec server checks them
    (issuer and audience set, a valid Settings), serves its metrics where it is scraped, and
    is reachable through its Service."""
    dep = _by_kind(objects, "Deployment")["ringflow-codec-server"]
    env = _container_env(dep, objects)
    settings = Settings(**_deployed_settings(objects))
    assert settings.codec_oidc_issuer and settings.codec_oidc_audience
    assert settings.codec_oidc_issuer.startswith("https://")
    assert env["RINGFLOW_CODEC_SERVER_HOST"] == "0.0.0.0"
    port = _port(dep, "http")
    assert int(dep["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"]) == port
    assert dep["spec"]["template"]["metadata"]["annotations"]["prometheus.io/path"] == "/metrics"
    assert "ringflow-codec-server" in _by_kind(objects, "Service")


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
    hpa = _by_kind(objects, "HorizontalPodAutoscaler").get("ringflow-api")
    if hpa is None:  # dev: one pod, no autoscaler
        assert api["spec"]["replicas"] == 1
    else:
        assert hpa["spec"]["scaleTargetRef"]["name"] == "ringflow-api"
