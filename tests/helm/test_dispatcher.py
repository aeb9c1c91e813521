"""The outbox dispatcher Deployment of the chart.

Without it, intents that processes commit are never delivered on Kubernetes.
Its command line is also parsed by the real CLI in test_cli_contract.py.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "svit-cluster"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
PRODUCTION = CHART / "ci" / "production-values.yaml"
RELEASE = "svit"

Manifest = dict[str, Any]
Render = Callable[..., list[Manifest]]


def _named(manifests: list[Manifest], kind: str, name: str) -> Manifest | None:
    found = [m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name]
    assert len(found) <= 1
    return found[0] if found else None


def _deployment(manifests: list[Manifest]) -> Manifest:
    d = _named(manifests, "Deployment", f"{RELEASE}-dispatcher")
    assert d is not None, "no dispatcher Deployment"
    return d


def _container(manifests: list[Manifest]) -> dict[str, Any]:
    c: dict[str, Any] = _deployment(manifests)["spec"]["template"]["spec"]["containers"][0]
    return c


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        if expr["operator"] == "In" and labels.get(expr["key"]) not in expr["values"]:
            return False
    return True


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in container["env"]}


@pytest.mark.parametrize(
    "values", [None, *CI_VALUES], ids=["default", *(p.stem for p in CI_VALUES)]
)
def test_dispatcher_runs_with_redis_gateway_and_token(render: Render, values: Path | None) -> None:
    manifests = render(values)
    c = _container(manifests)
    args = [*c["command"], *c["args"]]
    assert args[2:5] == ["svit-cluster", "dispatcher", "run"]
    metrics_port = int(args[args.index("--metrics-port") + 1])
    assert c["ports"] == [{"name": "metrics", "containerPort": metrics_port}]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}
    env = _env(c)
    assert env["SVIT_REDIS_URL"]["valueFrom"]["secretKeyRef"]
    assert env["SVIT_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "admin-token"
    gateway = _named(manifests, "Service", f"{RELEASE}-gateway")
    assert gateway is not None
    port = gateway["spec"]["ports"][0]["port"]
    assert env["SVIT_GATEWAY_URL"]["value"] == f"http://{RELEASE}-gateway.svit.svc.cluster.local:{port}"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"cpu", "memory"} <= set(c["resources"]["limits"])


def test_replicas_budget_service_and_monitor(render: Render) -> None:
    manifests = render()
    dep = _deployment(manifests)
    assert dep["spec"]["replicas"] == 2
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    pdb = _named(manifests, "PodDisruptionBudget", f"{RELEASE}-dispatcher")
    assert pdb is not None and pdb["spec"]["maxUnavailable"] == 1
    assert _selects(pdb["spec"]["selector"], pod_labels)
    service = _named(manifests, "Service", f"{RELEASE}-dispatcher-metrics")
    assert service is not None
    assert _selects({"matchLabels": service["spec"]["selector"]}, pod_labels)
    assert _named(manifests, "ServiceMonitor", f"{RELEASE}-dispatcher") is None  # flag off

    prod = render(PRODUCTION)
    monitor = _named(prod, "ServiceMonitor", f"{RELEASE}-dispatcher")
    assert monitor is not None
    service = _named(prod, "Service", f"{RELEASE}-dispatcher-metrics")
    assert service is not None
    assert _selects(monitor["spec"]["selector"], service["metadata"]["labels"])
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert _deployment(prod)["spec"]["replicas"] == 3


def test_webhook_hosts_become_allowlist_arguments(render: Render) -> None:
    args = _container(render(PRODUCTION))["args"]
    allowed = [args[i + 1] for i, a in enumerate(args) if a == "--allow-webhook-host"]
    assert allowed == ["hooks.example.com", "billing.example.com:8443"]
    assert args[-4:] == ["--max-attempts", "12", "--claim-idle", "60"]
    assert "--allow-webhook-host" not in _container(render())["args"]  # default: none


def test_dead_letter_bounds_become_arguments(render: Render) -> None:
    """dispatcher.deadLetters sets the dead-letter stream's count and age bounds."""
    def bound(args: list[str]) -> tuple[str, str]:
        return (args[args.index("--dead-letter-max-count") + 1],
                args[args.index("--dead-letter-max-age") + 1])

    assert bound(_container(render())["args"]) == ("10000", "604800")
    args = _container(render(None, "dispatcher.deadLetters.maxCount=2000000",
                             "dispatcher.deadLetters.maxAgeS=86400"))["args"]
    assert bound(args) == ("2000000", "86400")


def test_network_policy_egress_and_ingress(render: Render) -> None:
    manifests = render()
    policy = _named(manifests, "NetworkPolicy", f"{RELEASE}-dispatcher")
    assert policy is not None
    spec = policy["spec"]
    pod_labels = _deployment(manifests)["spec"]["template"]["metadata"]["labels"]
    assert _selects(spec["podSelector"], pod_labels)
    assert set(spec["policyTypes"]) == {"Ingress", "Egress"}
    assert spec["ingress"] == []  # default: nobody scrapes; kubelet probes come from the node
    egress = spec["egress"]
    assert {(p["protocol"], p["port"]) for p in egress[0]["ports"]} == {("UDP", 53), ("TCP", 53)}
    targets = {
        peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"]: rule["ports"][0]["port"]
        for rule in egress for peer in rule.get("to") or [] if "podSelector" in peer
    }
    assert targets == {"redis": 6379, "gateway": 8080}
    webhook = [r for r in egress if not r.get("to") and r["ports"][0]["port"] != 53]
    assert [{p["port"] for p in r["ports"]} for r in webhook] == [{80, 443}]

    # Redis admits the dispatcher; a restricted gateway ingress does too.
    redis = _named(manifests, "NetworkPolicy", f"{RELEASE}-redis")
    assert redis is not None
    assert any(_selects(peer["podSelector"], pod_labels)
               for rule in redis["spec"]["ingress"] for peer in rule["from"])
    prod = render(PRODUCTION)
    gateway = _named(prod, "NetworkPolicy", f"{RELEASE}-gateway")
    assert gateway is not None
    prod_labels = _deployment(prod)["spec"]["template"]["metadata"]["labels"]
    assert any("podSelector" in peer and _selects(peer["podSelector"], prod_labels)
               for rule in gateway["spec"]["ingress"] for peer in rule.get("from") or [])
    prod_policy = _named(prod, "NetworkPolicy", f"{RELEASE}-dispatcher")
    assert prod_policy is not None
    (scrape,) = prod_policy["spec"]["ingress"]
    assert scrape["ports"][0]["port"] == 9400 and scrape["from"][0]["namespaceSelector"]


def test_external_redis_egress_and_disabled_dispatcher(render: Render) -> None:
    external = render(CHART / "ci" / "external-values.yaml")
    policy = _named(external, "NetworkPolicy", f"{RELEASE}-dispatcher")
    assert policy is not None
    egress = policy["spec"]["egress"]
    # No in-cluster Redis pods to select: the externalRedisEgress rules instead.
    assert not any("redis" in str(r.get("to")) for r in egress)
    assert {"ports": [{"protocol": "TCP", "port": 6379}]} in egress
    off = render(None, "dispatcher.enabled=false")
    assert not [m for m in off if "dispatcher" in m["metadata"]["name"]]
