"""Operability of the chart, from the rendered manifests.

Pod annotations and labels, priorityClassName, topologySpreadConstraints, the
ServiceAccount, image digests, ServiceMonitors for etcd and the Redis exporter
(and the NetworkPolicy rules that let Prometheus scrape them), a public Ingress
that does not expose /metrics, /docs or /openapi.json, and the token-rotation
contract (the gateway re-reads its mounted tokens file; the dispatcher, which
reads its token from an environment variable, is rolled by a checksum).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "svit-cluster"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
VALUES_CASES = [None, *CI_VALUES]
VALUES_IDS = ["default", *(p.stem for p in CI_VALUES)]
PROD = CHART / "ci" / "production-values.yaml"
KUBERAY = CHART / "ci" / "kuberay-values.yaml"
RELEASE = "svit"
DIGEST = "sha256:" + "0123456789abcdef" * 4

Manifest = dict[str, Any]
Render = Callable[..., list[Manifest]]


def _kind(manifests: list[Manifest], kind: str) -> list[Manifest]:
    return [m for m in manifests if m["kind"] == kind]


def _pods(manifests: list[Manifest]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(owner, pod metadata, pod spec) of every pod the manifests create."""
    for m in manifests:
        owner = f"{m['kind']}/{m['metadata']['name']}"
        if m["kind"] in ("Deployment", "StatefulSet"):
            yield owner, m["spec"]["template"]["metadata"], m["spec"]["template"]["spec"]
        elif m["kind"] == "Pod":
            yield owner, m["metadata"], m["spec"]
        elif m["kind"] == "RayCluster":
            t = m["spec"]["headGroupSpec"]["template"]
            yield owner + "/head", t["metadata"], t["spec"]
            for group in m["spec"]["workerGroupSpecs"]:
                t = group["template"]
                yield f"{owner}/{group['groupName']}", t["metadata"], t["spec"]


def _component(meta: dict[str, Any]) -> str:
    return str(meta["labels"]["app.kubernetes.io/component"])


# --------------------------------------------------------------------------- ServiceAccount


@pytest.mark.parametrize("values", VALUES_CASES, ids=VALUES_IDS)
def test_every_pod_runs_as_the_release_service_account(render: Render,
                                                       values: Path | None) -> None:
    manifests = render(values)
    (account,) = _kind(manifests, "ServiceAccount")
    assert account["automountServiceAccountToken"] is False
    pods = list(_pods(manifests))
    assert len({_component(meta) for _, meta, _ in pods}) >= 4
    for owner, _, spec in pods:
        assert spec["serviceAccountName"] == account["metadata"]["name"], owner
        assert spec["automountServiceAccountToken"] is False, owner
    assert not _kind(manifests, "Role") and not _kind(manifests, "RoleBinding")


def test_an_existing_service_account(render: Render) -> None:
    manifests = render(None, "serviceAccount.create=false", "serviceAccount.name=mine",
                       "serviceAccount.automountServiceAccountToken=true")
    assert not _kind(manifests, "ServiceAccount")
    for owner, _, spec in _pods(manifests):
        assert spec["serviceAccountName"] == "mine", owner
        assert spec["automountServiceAccountToken"] is True, owner


# --------------------------------------------------------------------------- pod metadata


@pytest.mark.parametrize("values", [None, KUBERAY], ids=["pods", "kuberay"])
def test_pod_annotations_and_labels_global_and_per_component(render: Render,
                                                             values: Path | None) -> None:
    manifests = render(values, "podAnnotations.team=platform", "podLabels.tier=svit",
                       "gateway.podAnnotations.team=edge", "ray.workers.podLabels.tier=hosts",
                       # a user label may not take over a selector label
                       "etcd.podLabels.app\\.kubernetes\\.io/component=evil")
    seen = set()
    for owner, meta, _ in _pods(manifests):
        comp = _component(meta)
        seen.add(comp)
        want_team = "edge" if comp == "gateway" else "platform"
        assert meta["annotations"]["team"] == want_team, owner
        assert meta["labels"]["tier"] == ("hosts" if comp == "ray-worker" else "svit"), owner
        assert comp != "evil", owner
    assert {"gateway", "dispatcher", "etcd", "redis", "ray-head", "ray-worker", "test"} <= seen
    gateway = next(meta for _, meta, _ in _pods(manifests) if _component(meta) == "gateway")
    assert "checksum/config" in gateway["annotations"]  # the chart's own stay


def test_priority_class_and_topology_spread(render: Render) -> None:
    manifests = render(None, "priorityClassName=svit-high",
                       "redis.priorityClassName=svit-critical",
                       "topologySpreadConstraints[0].maxSkew=1",
                       "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
                       "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
                       "dispatcher.topologySpreadConstraints[0].maxSkew=2",
                       "dispatcher.topologySpreadConstraints[0].topologyKey=kubernetes.io/hostname",
                       "dispatcher.topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule")
    for owner, meta, spec in _pods(manifests):
        comp = _component(meta)
        assert spec["priorityClassName"] == ("svit-critical" if comp == "redis"
                                             else "svit-high"), owner
        (tsc,) = spec["topologySpreadConstraints"]
        want = (2, "kubernetes.io/hostname") if comp == "dispatcher" else (
            1, "topology.kubernetes.io/zone")
        assert (tsc["maxSkew"], tsc["topologyKey"]) == want, owner
        # the default selector counts this component's pods only
        assert tsc["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == comp
        assert tsc["labelSelector"]["matchLabels"]["app.kubernetes.io/instance"] == RELEASE
    default = render()
    for owner, _, spec in _pods(default):
        assert "priorityClassName" not in spec and "topologySpreadConstraints" not in spec, owner


# --------------------------------------------------------------------------- images


def test_image_digest_overrides_the_tag(render: Render) -> None:
    manifests = render(None, f"image.digest={DIGEST}", "image.tag=ignored",
                       f"etcd.image.digest={DIGEST}", f"redis.image.digest={DIGEST}",
                       "redis.metrics.enabled=true", f"redis.metrics.image.digest={DIGEST}")
    images = {c["image"] for _, _, spec in _pods(manifests) for c in spec["containers"]}
    assert images == {f"svit-cluster@{DIGEST}", f"quay.io/coreos/etcd@{DIGEST}",
                      f"docker.io/library/redis@{DIGEST}",
                      f"docker.io/oliver006/redis_exporter@{DIGEST}"}
    tags = {c["image"] for _, _, spec in _pods(render()) for c in spec["containers"]}
    assert "svit-cluster:0.1.0" in tags or any(i.startswith("svit-cluster:") for i in tags)
    assert not any("@" in i for i in tags)


def test_a_malformed_digest_is_refused(run_helm: Callable[..., Any]) -> None:
    proc = run_helm("template", RELEASE, str(CHART), "--set", "image.digest=latest")
    assert proc.returncode != 0 and "/image/digest" in proc.stderr, proc.stderr


# --------------------------------------------------------------------------- Ingress


def _routed(ingress: Manifest, path: str) -> bool:
    """Whether an Ingress rule sends ``path`` to a backend (Prefix/Exact semantics)."""
    for rule in ingress["spec"]["rules"]:
        for p in rule["http"]["paths"]:
            want = p["path"]
            if p["pathType"] == "Exact" and path == want:
                return True
            if p["pathType"] in ("Prefix", "ImplementationSpecific") and (
                    want == "/" or path == want.rstrip("/")
                    or path.startswith(want.rstrip("/") + "/")):
                return True
    return False


@pytest.mark.parametrize("values", [None, PROD], ids=["default", "production-values"])
def test_public_ingress_routes_the_api_not_metrics_or_docs(render: Render,
                                                           values: Path | None) -> None:
    (ingress,) = _kind(render(values, "gateway.ingress.enabled=true"), "Ingress")
    for path in ("/v1/control", "/v1/processes/state", "/healthz", "/ui", "/ui/",
                 "/ui/console.js"):
        assert _routed(ingress, path), path
    for path in ("/metrics", "/docs", "/openapi.json", "/docs/oauth2-redirect"):
        assert not _routed(ingress, path), path


def test_the_ingress_check_can_fail(render: Render) -> None:
    """Negative control: the old catch-all path routes /metrics."""
    (ingress,) = _kind(render(None, "gateway.ingress.enabled=true",
                              "gateway.ingress.hosts[0].host=a.example",
                              "gateway.ingress.hosts[0].paths[0].path=/",
                              "gateway.ingress.hosts[0].paths[0].pathType=Prefix"), "Ingress")
    assert _routed(ingress, "/metrics") and _routed(ingress, "/openapi.json")


# --------------------------------------------------------------------------- metrics


def _service_ports(manifests: list[Manifest], selector: dict[str, Any]) -> list[set[str]]:
    out = []
    for svc in _kind(manifests, "Service"):
        labels = svc["metadata"]["labels"]
        if all(labels.get(k) == v for k, v in selector["matchLabels"].items()) and all(
                labels.get(e["key"]) in e["values"] for e in selector.get("matchExpressions", [])):
            out.append({p["name"] for p in svc["spec"]["ports"]})
    return out


def test_service_monitors_for_etcd_and_the_redis_exporter(render: Render) -> None:
    manifests = render(PROD)
    monitors = {m["metadata"]["name"]: m for m in _kind(manifests, "ServiceMonitor")}
    for name in (f"{RELEASE}-etcd", f"{RELEASE}-redis"):
        spec = monitors[name]["spec"]
        (ports,) = _service_ports(manifests, spec["selector"])  # exactly one Service
        assert spec["endpoints"][0]["port"] in ports
        assert monitors[name]["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    redis = next(m for m in _kind(manifests, "StatefulSet") if m["metadata"]["name"]
                 == f"{RELEASE}-redis")
    exporter = [c for c in redis["spec"]["template"]["spec"]["containers"]
                if c["name"] == "metrics"]
    assert exporter and exporter[0]["ports"][0]["containerPort"] == 9121
    env = {e["name"] for e in exporter[0]["env"]}
    assert {"REDIS_ADDR", "REDIS_PASSWORD"} <= env
    # Prometheus (namespace "monitoring") may reach the metrics ports; others may not.
    policies = {p["metadata"]["name"]: p for p in _kind(manifests, "NetworkPolicy")}
    for name, port in ((f"{RELEASE}-etcd", 2381), (f"{RELEASE}-redis", 9121)):
        rules = [r for r in policies[name]["spec"]["ingress"]
                 if port in [p["port"] for p in r.get("ports", [])]]
        assert rules and all(
            peer.get("namespaceSelector", {}).get("matchLabels", {}).get(
                "kubernetes.io/metadata.name") == "monitoring"
            for r in rules for peer in r["from"]), name


def test_no_redis_monitor_without_an_exporter(render: Render) -> None:
    manifests = render(None, "metrics.serviceMonitor.enabled=true")
    names = {m["metadata"]["name"] for m in _kind(manifests, "ServiceMonitor")}
    assert f"{RELEASE}-redis" not in names and f"{RELEASE}-etcd" in names
    external = render(None, "metrics.serviceMonitor.enabled=true", "etcd.enabled=false",
                      "etcd.external.endpoints[0]=etcd.example:2379")
    assert f"{RELEASE}-etcd" not in {m["metadata"]["name"]
                                     for m in _kind(external, "ServiceMonitor")}


# --------------------------------------------------------------------------- token rotation


def _annotations(manifests: list[Manifest], component: str) -> dict[str, str]:
    for _, meta, _ in _pods(manifests):
        if _component(meta) == component:
            return dict(meta.get("annotations") or {})
    raise AssertionError(component)


def test_token_rotation_contract(render: Render) -> None:
    """The gateway mounts the Secret as a whole-file volume (no subPath, so the
    kubelet updates it in place; svit re-reads it); the dispatcher, which reads
    SVIT_TOKEN from the environment, carries a checksum of the generated Secret."""
    manifests = render()
    gateway = next(m for m in _kind(manifests, "Deployment")
                   if m["metadata"]["name"] == f"{RELEASE}-gateway")
    (container,) = gateway["spec"]["template"]["spec"]["containers"]
    (mount,) = [v for v in container["volumeMounts"] if v["name"] == "tokens"]
    assert "subPath" not in mount
    assert "checksum/tokens" not in _annotations(manifests, "gateway")
    assert len(_annotations(manifests, "dispatcher")["checksum/tokens"]) == 64
    external = render(None, "auth.generateSecret=false", "auth.existingSecret=mine")
    assert _annotations(external, "dispatcher")["checksum/tokens"] == "external"


def test_kuberay_autoscaler_keeps_its_own_head_service_account(render: Render) -> None:
    """KubeRay gives the head a ServiceAccount with RBAC when its autoscaler is on."""
    manifests = render(KUBERAY, "ray.kuberay.enableInTreeAutoscaling=true",
                       "ray.kuberay.maxReplicas=4")
    specs = {owner: spec for owner, _, spec in _pods(manifests)}
    head = next(spec for owner, spec in specs.items() if owner.endswith("/head"))
    assert "serviceAccountName" not in head
    workers = [spec for owner, spec in specs.items()
               if owner.startswith("RayCluster/") and not owner.endswith("/head")]
    assert workers and all(w["serviceAccountName"] == RELEASE for w in workers)
