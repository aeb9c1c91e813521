"""Static tests of the Helm chart in helm/svit-cluster, on objects rendered by a real Helm.

No Kubernetes cluster is involved: the chart is rendered with `helm template`,
validated offline against the Kubernetes JSON schemas bundled with
kubernetes-validate, and its objects are inspected.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "svit-cluster"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
INVALID_VALUES = sorted((Path(__file__).resolve().parent / "invalid-values").glob("*.yaml"))
RELEASE = "svit"

# Two Kubernetes minor versions whose schemas kubernetes-validate bundles.
KUBE_VERSIONS = ("1.30.0", "1.35.0")

# Custom resources: kubernetes-validate bundles no schema for them, so they are
# skipped explicitly (every other kind must validate).
CRD_KINDS = {("ray.io/v1", "RayCluster"), ("monitoring.coreos.com/v1", "ServiceMonitor")}

VALUES_CASES = [None, *CI_VALUES]
VALUES_IDS = ["default", *(p.stem for p in CI_VALUES)]

Manifest = dict[str, Any]
Render = Callable[..., list[Manifest]]


def _kind(manifests: list[Manifest], kind: str) -> list[Manifest]:
    return [m for m in manifests if m["kind"] == kind]


def _one(manifests: list[Manifest], kind: str, name: str) -> Manifest:
    found = [m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def _config(manifests: list[Manifest]) -> dict[str, str]:
    data: dict[str, str] = _one(manifests, "ConfigMap", f"{RELEASE}-config")["data"]
    return data


def _pods(manifests: list[Manifest]) -> Iterator[tuple[str, dict[str, str], dict[str, Any]]]:
    """(owner, pod labels, pod spec) for every pod the manifests create."""
    for m in manifests:
        owner = f"{m['kind']}/{m['metadata']['name']}"
        if m["kind"] in ("Deployment", "StatefulSet"):
            t = m["spec"]["template"]
            yield owner, t["metadata"]["labels"], t["spec"]
        elif m["kind"] == "Pod":
            yield owner, m["metadata"]["labels"], m["spec"]
        elif m["kind"] == "RayCluster":
            t = m["spec"]["headGroupSpec"]["template"]
            yield owner + "/head", t["metadata"]["labels"], t["spec"]
            for group in m["spec"]["workerGroupSpecs"]:
                t = group["template"]
                yield f"{owner}/{group['groupName']}", t["metadata"]["labels"], t["spec"]


def _is_hook(labels: dict[str, str]) -> bool:
    return labels.get("app.kubernetes.io/component") == "test"


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Kubernetes LabelSelector semantics."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _env(container: dict[str, Any], name: str) -> dict[str, Any]:
    for var in container.get("env") or []:
        if var["name"] == name:
            return dict(var)
    raise AssertionError(f"{container['name']} has no env {name}")


def _decoded_secret_values(manifests: list[Manifest]) -> list[str]:
    out = []
    for secret in _kind(manifests, "Secret"):
        for value in (secret.get("data") or {}).values():
            out.append(base64.b64decode(value).decode())
    return out


# --------------------------------------------------------------------------- lint + schema


@pytest.mark.parametrize("values", VALUES_CASES, ids=VALUES_IDS)
def test_helm_lint_strict(run_helm: Callable[..., Any], values: Path | None) -> None:
    args = ["lint", "--strict", str(CHART)] + (["-f", str(values)] if values else [])
    proc = run_helm(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("values", VALUES_CASES, ids=VALUES_IDS)
def test_manifests_pass_kubernetes_schema(
    render: Render, kubernetes_validate: Any, values: Path | None, kube_version: str
) -> None:
    manifests = render(values, kube_version=kube_version)
    checked = 0
    for m in manifests:
        if (m["apiVersion"], m["kind"]) in CRD_KINDS:
            continue  # no bundled schema for custom resources: skipped on purpose
        # strict: unknown fields fail; SchemaNotFoundError (a typo in a built-in
        # apiVersion or kind) propagates and fails the test.
        kubernetes_validate.validate(m, kube_version, strict=True)
        checked += 1
    assert checked >= 10


@pytest.mark.parametrize("values", INVALID_VALUES, ids=[p.stem for p in INVALID_VALUES])
def test_values_breaking_the_schema_fail_with_a_clear_message(
    run_helm: Callable[..., Any], values: Path
) -> None:
    expected = next(
        line.removeprefix("# expect: ").strip()
        for line in values.read_text().splitlines()
        if line.startswith("# expect: ")
    )
    proc = run_helm("template", RELEASE, str(CHART), "-f", str(values))
    assert proc.returncode != 0, f"{values.name} rendered but must be rejected"
    assert expected in proc.stderr, proc.stderr


def test_invalid_values_cover_the_required_cases() -> None:
    names = {p.stem for p in INVALID_VALUES}
    assert {"etcd-even-replicas", "negative-lease-ttl", "missing-token-secret"} <= names


# --------------------------------------------------------------------------- etcd


@pytest.mark.parametrize("values", VALUES_CASES, ids=VALUES_IDS)
def test_etcd_member_count_is_odd(render: Render, values: Path | None) -> None:
    manifests = render(values)
    statefulsets = [
        s for s in _kind(manifests, "StatefulSet") if s["metadata"]["name"] == f"{RELEASE}-etcd"
    ]
    if not statefulsets:
        endpoints = _config(manifests)["SVIT_ETCD_ENDPOINTS"]
        assert endpoints, "external etcd needs endpoints"
        return
    sts = statefulsets[0]
    replicas = sts["spec"]["replicas"]
    assert replicas % 2 == 1
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    container = sts["spec"]["template"]["spec"]["containers"][0]
    initial = _env(container, "ETCD_INITIAL_CLUSTER")["value"].split(",")
    assert len(initial) == replicas
    assert len(_config(manifests)["SVIT_ETCD_ENDPOINTS"].split(",")) == replicas


@pytest.mark.parametrize("replicas", [1, 3, 5, 7])
def test_etcd_quorum_budget_and_storage(render: Render, replicas: int) -> None:
    manifests = render(None, f"etcd.replicas={replicas}")
    sts = _one(manifests, "StatefulSet", f"{RELEASE}-etcd")
    assert sts["spec"]["replicas"] == replicas
    pdb = _one(manifests, "PodDisruptionBudget", f"{RELEASE}-etcd")
    assert pdb["spec"]["minAvailable"] == replicas // 2 + 1
    assert _one(manifests, "Service", f"{RELEASE}-etcd-headless")["spec"]["clusterIP"] == "None"
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data"


@pytest.mark.parametrize("replicas", [0, 2, 4, 6])
def test_even_or_zero_etcd_replicas_are_rejected(
    run_helm: Callable[..., Any], replicas: int
) -> None:
    proc = run_helm("template", RELEASE, str(CHART), "--set", f"etcd.replicas={replicas}")
    assert proc.returncode != 0
    assert "/etcd/replicas" in proc.stderr


# --------------------------------------------------------------------------- Redis


def _redis_conf(manifests: list[Manifest]) -> list[str]:
    conf = _one(manifests, "ConfigMap", f"{RELEASE}-redis-config")["data"]["redis.conf"]
    return [
        line.strip()
        for line in conf.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def test_redis_is_append_only_with_fsync_always(render: Render) -> None:
    manifests = render()
    lines = _redis_conf(manifests)
    assert "appendonly yes" in lines
    assert "appendfsync always" in lines
    assert "maxmemory-policy noeviction" in lines
    assert not any(
        line.startswith("appendfsync") and line != "appendfsync always" for line in lines
    )
    sts = _one(manifests, "StatefulSet", f"{RELEASE}-redis")
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    mounts = sts["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert {"name": claim["metadata"]["name"], "mountPath": "/data"} in mounts
    assert "dir /data" in lines


def test_redis_password_is_not_in_the_config_map(render: Render) -> None:
    manifests = render()
    assert not any(line.startswith("requirepass") for line in _redis_conf(manifests))
    secret = _one(manifests, "Secret", f"{RELEASE}-redis")
    password = base64.b64decode(secret["data"]["redis-password"]).decode()
    url = base64.b64decode(secret["data"]["redis-url"]).decode()
    assert f":{password}@" in url


# --------------------------------------------------------------------------- tokens


def test_gateway_tokens_come_from_a_secret(render: Render) -> None:
    manifests = render()
    secret = _one(manifests, "Secret", f"{RELEASE}-tokens")
    admin = base64.b64decode(secret["data"]["admin-token"]).decode()
    doc = json.loads(base64.b64decode(secret["data"]["tokens.json"]))
    assert {"token": admin, "admin": True} in doc["tokens"]
    assert len(admin) >= 32

    gateway = _one(manifests, "Deployment", f"{RELEASE}-gateway")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in gateway["volumes"]}
    mounts = {m["name"]: m for m in gateway["containers"][0]["volumeMounts"]}
    token_volumes = [n for n, v in volumes.items() if "secret" in v]
    assert token_volumes == ["tokens"]
    assert volumes["tokens"]["secret"]["secretName"] == f"{RELEASE}-tokens"
    path = mounts["tokens"]["mountPath"] + "/" + volumes["tokens"]["secret"]["items"][0]["path"]
    assert _config(manifests)["SVIT_TOKENS_FILE"] == path
    assert not any("configMap" in v and "token" in n for n, v in volumes.items())


@pytest.mark.parametrize("values", VALUES_CASES, ids=VALUES_IDS)
def test_no_secret_value_appears_outside_secrets(render: Render, values: Path | None) -> None:
    manifests = render(values)
    secrets = [s for s in _decoded_secret_values(manifests) if len(s) >= 16]
    for m in manifests:
        if m["kind"] == "Secret":
            continue
        text = json.dumps(m)
        for s in secrets:
            assert s not in text, f"{m['kind']}/{m['metadata']['name']} holds a secret value"
    for cm in _kind(manifests, "ConfigMap"):
        for key in cm["data"]:
            assert "TOKEN" not in key.upper() or key == "SVIT_TOKENS_FILE"
            assert "PASSWORD" not in key.upper()


def test_tenant_tokens_and_existing_secret(render: Render) -> None:
    manifests = render(None, "auth.tenants={acme,globex}")
    secret = _one(manifests, "Secret", f"{RELEASE}-tokens")
    doc = json.loads(base64.b64decode(secret["data"]["tokens.json"]))
    assert sorted(t.get("tenant", "") for t in doc["tokens"]) == ["", "acme", "globex"]
    assert {"tenant-acme-token", "tenant-globex-token"} <= set(secret["data"])

    manifests = render(CHART / "ci" / "external-values.yaml")
    assert not [s for s in _kind(manifests, "Secret") if s["metadata"]["name"].endswith("-tokens")]
    gateway = _one(manifests, "Deployment", f"{RELEASE}-gateway")["spec"]["template"]["spec"]
    (tokens,) = [v for v in gateway["volumes"] if v["name"] == "tokens"]
    assert tokens["secret"]["secretName"] == "svit-gateway-tokens"


def test_helm_test_hook_runs_an_authenticated_activation(render: Render) -> None:
    manifests = render()
    (pod,) = [
        p
        for p in _kind(manifests, "Pod")
        if p["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"
    ]
    (container,) = pod["spec"]["containers"]
    # the hook deletes the process it used
    assert container["args"][:4] == ["svit-cluster", "smoke", "--delete", "--url"]
    assert container["args"][4].startswith(f"http://{RELEASE}-gateway.")
    token = _env(container, "SVIT_TOKEN")["valueFrom"]["secretKeyRef"]
    assert token == {"name": f"{RELEASE}-tokens", "key": "admin-token"}
    assert pod["spec"]["restartPolicy"] == "Never"


# --------------------------------------------------------------------------- NetworkPolicies


def _policies(manifests: list[Manifest]) -> dict[str, Manifest]:
    return {
        p["metadata"]["name"].removeprefix(f"{RELEASE}-"): p
        for p in _kind(manifests, "NetworkPolicy")
    }


def _admits(policy: Manifest, labels: dict[str, str], port: int | None = None) -> bool:
    """Whether an in-namespace pod with these labels may connect (to port, if given)."""
    for rule in policy["spec"].get("ingress") or []:
        ports = [p["port"] for p in rule.get("ports") or []]
        if port is not None and ports and port not in ports:
            continue
        peers = rule.get("from")
        if not peers:
            return True
        if any(
            "podSelector" in peer
            and "namespaceSelector" not in peer
            and _selects(peer["podSelector"], labels)
            for peer in peers
        ):
            return True
    return False


@pytest.mark.parametrize("values", VALUES_CASES, ids=VALUES_IDS)
def test_network_policies_select_the_right_pods(render: Render, values: Path | None) -> None:
    manifests = render(values)
    policies = _policies(manifests)
    pods = {owner: labels for owner, labels, _ in _pods(manifests) if not _is_hook(labels)}
    by_component: dict[str, list[dict[str, str]]] = {}
    for labels in pods.values():
        by_component.setdefault(labels["app.kubernetes.io/component"], []).append(labels)
    outsider = {"app": "something-else"}
    other_release = {**by_component["gateway"][0], "app.kubernetes.io/instance": "other"}

    # Every pod of the release is covered by a policy (so default-deny applies to it).
    for owner, labels in pods.items():
        assert any(_selects(p["spec"]["podSelector"], labels) for p in policies.values()), owner

    # Only the gateway admits arbitrary sources, and only on its HTTP port.
    open_policies = {
        name for name, p in policies.items() if any(not r.get("from") for r in p["spec"]["ingress"])
    }
    assert open_policies <= {"gateway"}
    gateway_port = _one(manifests, "Deployment", f"{RELEASE}-gateway")["spec"]["template"]["spec"][
        "containers"
    ][0]["ports"][0]["containerPort"]
    for rule in policies["gateway"]["spec"]["ingress"]:
        if not rule.get("from"):
            assert [p["port"] for p in rule["ports"]] == [gateway_port]
    for labels in by_component["gateway"]:
        assert _selects(policies["gateway"]["spec"]["podSelector"], labels)

    ray = policies["ray"]
    for component in ("gateway", "etcd", "redis"):
        for labels in by_component.get(component, []):
            assert not _selects(ray["spec"]["podSelector"], labels), component
    for component in ("ray-head", "ray-worker"):
        for labels in by_component[component]:
            assert _selects(ray["spec"]["podSelector"], labels)
            assert _admits(ray, labels)
    assert not _admits(ray, outsider)
    assert not _admits(ray, other_release)

    for store, port_key in (("etcd", "SVIT_ETCD_ENDPOINTS"), ("redis", None)):
        if store not in by_component:
            assert store not in policies  # external: nothing to protect here
            continue
        policy = policies[store]
        for component, labels_list in by_component.items():
            for labels in labels_list:
                selected = _selects(policy["spec"]["podSelector"], labels)
                assert selected == (component == store), (store, component)
        client_port = (
            int(_config(manifests)[port_key].split(",")[0].rsplit(":", 1)[1]) if port_key else 6379
        )
        for component, labels_list in by_component.items():
            for labels in labels_list:
                may_connect = _admits(policy, labels, client_port)
                # etcd members also reach each other's client port; Redis has no
                # peers; the outbox dispatcher is a Redis client only.
                expected = (component in ("gateway", "ray-worker")
                            or (component == store == "etcd")
                            or (component == "dispatcher" and store == "redis"))
                assert may_connect == expected, (store, component)
        assert not _admits(policy, outsider)
        assert not _admits(policy, other_release)
    if "etcd" in policies:
        peer_port = _one(manifests, "StatefulSet", f"{RELEASE}-etcd")["spec"]["template"]["spec"][
            "containers"
        ][0]["ports"][1]["containerPort"]
        assert not _admits(policies["etcd"], by_component["gateway"][0], peer_port)
        assert _admits(policies["etcd"], by_component["etcd"][0], peer_port)


def test_network_policies_can_be_disabled(render: Render) -> None:
    assert not _kind(render(None, "networkPolicy.enabled=false"), "NetworkPolicy")


# --------------------------------------------------------------------------- pods


@pytest.mark.parametrize("values", VALUES_CASES, ids=VALUES_IDS)
def test_every_long_running_container_has_probes(render: Render, values: Path | None) -> None:
    for owner, labels, spec in _pods(render(values)):
        if _is_hook(labels):
            continue
        for c in spec["containers"]:
            assert "livenessProbe" in c, f"{owner}/{c['name']}"
            assert "readinessProbe" in c, f"{owner}/{c['name']}"


def test_gateway_and_host_agent_probes_use_the_runtime_contract(render: Render) -> None:
    manifests = render()
    gateway = _one(manifests, "Deployment", f"{RELEASE}-gateway")["spec"]["template"]["spec"]
    container = gateway["containers"][0]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    # Liveness must not depend on registered hosts (/healthz is 503 without them).
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "http"}
    assert container["startupProbe"]["httpGet"] == {"path": "/livez", "port": "http"}
    hosts = _one(manifests, "StatefulSet", f"{RELEASE}-ray-worker")["spec"]["template"]["spec"]
    host = hosts["containers"][0]
    heartbeat = _env(host, "SVIT_AGENT_HEARTBEAT_FILE")["value"]
    live = host["livenessProbe"]["exec"]["command"]
    ready = host["readinessProbe"]["exec"]["command"]
    assert live[:4] == ["svit-cluster", "healthcheck", "--heartbeat", heartbeat]
    assert "--require-lease" not in live
    assert ready[:4] == live[:4] and "--require-lease" in ready


@pytest.mark.parametrize("values", VALUES_CASES, ids=VALUES_IDS)
def test_containers_run_as_non_root(render: Render, values: Path | None) -> None:
    for owner, _, spec in _pods(render(values)):
        pod_ctx = spec["securityContext"]
        assert pod_ctx["runAsNonRoot"] is True, owner
        assert pod_ctx.get("runAsUser", 1) != 0, owner
        assert pod_ctx["seccompProfile"]["type"] == "RuntimeDefault", owner
        for c in spec["containers"] + spec.get("initContainers", []):
            ctx = c["securityContext"]
            where = f"{owner}/{c['name']}"
            assert ctx["runAsNonRoot"] is True, where
            assert ctx.get("runAsUser", 1) != 0, where
            assert ctx["allowPrivilegeEscalation"] is False, where
            assert ctx["capabilities"]["drop"] == ["ALL"], where
            assert not ctx["capabilities"].get("add"), where
            assert ctx["readOnlyRootFilesystem"] is True, where
            assert ctx.get("privileged", False) is False, where


@pytest.mark.parametrize("values", VALUES_CASES, ids=VALUES_IDS)
def test_containers_have_requests_and_limits(render: Render, values: Path | None) -> None:
    for owner, _, spec in _pods(render(values)):
        for c in spec["containers"]:
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][kind]), f"{owner}/{c['name']}"


def test_default_disruption_budgets(render: Render) -> None:
    manifests = render()
    pods = [labels for _, labels, _ in _pods(manifests)]
    budgets = {
        p["metadata"]["name"].removeprefix(f"{RELEASE}-"): p
        for p in _kind(manifests, "PodDisruptionBudget")
    }
    assert {"etcd", "redis", "ray-worker"} <= set(budgets)
    for name, pdb in budgets.items():
        selected = {
            labels["app.kubernetes.io/component"]
            for labels in pods
            if _selects(pdb["spec"]["selector"], labels)
        }
        assert selected == {name}, name
    assert budgets["ray-worker"]["spec"]["maxUnavailable"] == 1


# --------------------------------------------------------------------------- configuration


def test_runtime_defaults_match_the_local_cluster(render: Render) -> None:
    config = _config(render())
    assert config["SVIT_LEASE_TTL_S"] == "5"
    assert config["SVIT_SNAPSHOT_EVERY"] == "100"
    assert config["SVIT_PASSIVATE_AFTER_S"] == "300"
    assert config["SVIT_MAX_REQUEST_BYTES"] == "1048576"
    assert config["SVIT_SIGNAL_RETENTION"] == "10000"
    assert config["SVIT_MAX_EVENTS"] == "100000"
    assert config["SVIT_REDIS_CLUSTER"] == "false"
    assert config["SVIT_CLUSTER"] == "svit"
    assert config["SVIT_RAY_ADDRESS"] == f"{RELEASE}-ray-head.svit.svc.cluster.local:6379"
    # Tuned Ray health checks (docs/architecture.md) and no Ray auth behind NetworkPolicies.
    assert config["RAY_health_check_period_ms"] == "500"
    assert config["RAY_health_check_failure_threshold"] == "3"
    assert config["RAY_health_check_timeout_ms"] == "500"
    assert config["RAY_AUTH_MODE"] == "disabled"


def test_runtime_values_reach_the_config_map(render: Render) -> None:
    config = _config(
        render(
            None,
            "runtime.leaseTtlS=10",
            "runtime.snapshotEvery=250",
            "runtime.passivateAfterS=60",
            "runtime.maxRequestBytes=4194304",
            "runtime.signalRetention=500",
            "runtime.maxEvents=2000",
        )
    )
    assert (
        config["SVIT_LEASE_TTL_S"],
        config["SVIT_SNAPSHOT_EVERY"],
        config["SVIT_PASSIVATE_AFTER_S"],
        config["SVIT_MAX_REQUEST_BYTES"],
        config["SVIT_SIGNAL_RETENTION"],
        config["SVIT_MAX_EVENTS"],
    ) == ("10", "250", "60", "4194304", "500", "2000")


@pytest.mark.parametrize("values", VALUES_CASES, ids=VALUES_IDS)
def test_svit_containers_get_config_and_redis_url(render: Render, values: Path | None) -> None:
    manifests = render(values)
    for owner, labels, spec in _pods(manifests):
        if labels["app.kubernetes.io/component"] not in ("gateway", "ray-worker", "ray-head"):
            continue
        (c,) = spec["containers"]
        assert c["envFrom"] == [{"configMapRef": {"name": f"{RELEASE}-config"}}], owner
        assert "secretKeyRef" in _env(c, "SVIT_REDIS_URL")["valueFrom"], owner
        assert c["command"] == ["/usr/bin/tini", "--"], owner


def test_kuberay_mode_renders_a_ray_cluster(render: Render) -> None:
    manifests = render(CHART / "ci" / "kuberay-values.yaml")
    (cluster,) = _kind(manifests, "RayCluster")
    assert cluster["metadata"]["annotations"]["ray.io/overwrite-container-cmd"] == "true"
    assert not [d for d in _kind(manifests, "Deployment") if "ray-head" in d["metadata"]["name"]]
    assert not [s for s in _kind(manifests, "StatefulSet") if "ray-worker" in s["metadata"]["name"]]
    (group,) = cluster["spec"]["workerGroupSpecs"]
    assert group["replicas"] == 3
    worker = group["template"]["spec"]["containers"][0]
    assert worker["args"] == ["svit-node", "host"]
    config = _config(manifests)
    assert config["SVIT_RAY_ADDRESS"].startswith(f"{cluster['metadata']['name']}-head-svc.")
    assert config["RAY_AUTH_MODE"] == "token"
    assert "secretKeyRef" in _env(worker, "RAY_AUTH_TOKEN")["valueFrom"]


def test_external_etcd_and_redis_cluster(render: Render) -> None:
    manifests = render(CHART / "ci" / "external-values.yaml")
    names = {s["metadata"]["name"] for s in _kind(manifests, "StatefulSet")}
    assert names == {f"{RELEASE}-ray-worker"}
    config = _config(manifests)
    assert config["SVIT_ETCD_ENDPOINTS"].split(",")[0] == "etcd-0.etcd.infra.svc.cluster.local:2379"
    assert config["SVIT_REDIS_CLUSTER"] == "true"
    gateway = _one(manifests, "Deployment", f"{RELEASE}-gateway")["spec"]["template"]["spec"]
    ref = _env(gateway["containers"][0], "SVIT_REDIS_URL")["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "svit-redis-cluster", "key": "redis-url"}


def test_external_redis_url_is_kept_in_a_secret(render: Render) -> None:
    url = "redis://:s3cr3t-pass-word@redis.infra.svc:6379/0"
    manifests = render(None, "redis.enabled=false", f"redis.external.url={url}")
    assert not [
        s for s in _kind(manifests, "StatefulSet") if s["metadata"]["name"].endswith("-redis")
    ]
    secret = _one(manifests, "Secret", f"{RELEASE}-redis")
    assert base64.b64decode(secret["data"]["redis-url"]).decode() == url
    assert url not in json.dumps(_kind(manifests, "ConfigMap"))


def test_eviction_policy_override_reaches_only_external_redis(render: Render) -> None:
    """svit refuses a Redis that may evict keys; the override (for a managed Redis
    without CONFIG) is off by default and never applies to the bundled Redis."""
    assert _config(render())["SVIT_REDIS_ALLOW_UNVERIFIED_EVICTION_POLICY"] == "false"
    bundled = render(None, "redis.external.allowUnverifiedEvictionPolicy=true")
    assert _config(bundled)["SVIT_REDIS_ALLOW_UNVERIFIED_EVICTION_POLICY"] == "false"
    assert "maxmemory-policy noeviction" in _redis_conf(bundled)
    external = render(None, "redis.enabled=false", "redis.external.url=redis://r.infra:6379/0",
                      "redis.external.allowUnverifiedEvictionPolicy=true")
    assert _config(external)["SVIT_REDIS_ALLOW_UNVERIFIED_EVICTION_POLICY"] == "true"


def test_wait_replicas_reach_only_external_redis(render: Render) -> None:
    """WAIT after commits and claims: off by default and for the bundled
    single Redis (it has no replica); set for an external Redis with replicas."""
    assert _config(render())["SVIT_REDIS_WAIT_REPLICAS"] == "0"
    assert _config(render(None, "redis.external.waitReplicas=1"))[
        "SVIT_REDIS_WAIT_REPLICAS"] == "0"
    external = render(None, "redis.enabled=false", "redis.external.url=redis://r.infra:6379/0",
                      "redis.external.cluster=true", "redis.external.waitReplicas=1",
                      "redis.external.waitTimeoutMs=250")
    config = _config(external)
    assert (config["SVIT_REDIS_CLUSTER"], config["SVIT_REDIS_WAIT_REPLICAS"],
            config["SVIT_REDIS_WAIT_TIMEOUT_MS"]) == ("true", "1", "250")


def test_restricted_gateway_ingress_still_admits_the_test_hook(render: Render) -> None:
    manifests = render(CHART / "ci" / "production-values.yaml")
    policy = _policies(manifests)["gateway"]
    (hook_labels,) = [labels for _, labels, _ in _pods(manifests) if _is_hook(labels)]
    assert _admits(policy, hook_labels, 8080)
    assert not _admits(policy, {"app": "something-else"}, 8080)


def test_optional_gateway_resources(render: Render) -> None:
    manifests = render(CHART / "ci" / "production-values.yaml")
    assert _one(manifests, "Ingress", f"{RELEASE}-gateway")
    hpa = _one(manifests, "HorizontalPodAutoscaler", f"{RELEASE}-gateway")
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 12)
    assert "replicas" not in _one(manifests, "Deployment", f"{RELEASE}-gateway")["spec"]
    monitors = {m["metadata"]["name"]: m for m in _kind(manifests, "ServiceMonitor")}
    # etcd serves /metrics itself; Redis needs redis.metrics.enabled (exporter).
    assert set(monitors) == {f"{RELEASE}-gateway", f"{RELEASE}-dispatcher", f"{RELEASE}-etcd",
                             f"{RELEASE}-redis"}
    for monitor in monitors.values():
        assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    default = render()
    assert not _kind(default, "Ingress") and not _kind(default, "HorizontalPodAutoscaler")
    assert not _kind(default, "ServiceMonitor")


def test_gateway_cors_origins_reach_the_gateway_env(render: Render) -> None:
    """gateway.corsOrigins becomes SVIT_CORS_ORIGINS (a comma list, which
    svit_cluster.settings.GatewaySettings parses); unset by default (no CORS)."""
    from svit_cluster.gateway import parse_origins

    def env(manifests: list[Manifest]) -> dict[str, str]:
        spec = _one(manifests, "Deployment", f"{RELEASE}-gateway")["spec"]["template"]["spec"]
        (container,) = [c for c in spec["containers"] if c["name"] == "gateway"]
        return {e["name"]: e.get("value") for e in container.get("env") or []}

    prod = env(render(CHART / "ci" / "production-values.yaml"))
    assert parse_origins(prod["SVIT_CORS_ORIGINS"]) == \
        ("https://chat.example.com", "http://localhost:3000")
    assert "SVIT_CORS_ORIGINS" not in env(render())
