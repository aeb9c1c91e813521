"""Prometheus metrics for the gateway (``GET /metrics``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["GatewayMetrics"]


class GatewayMetrics:
    """One registry per app, so several gateways (tests) never collide."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.outcomes = Counter(
            "svit_control_outcomes_total",
            "Control responses by outcome status (committed, conflict, rejected).",
            ["status"],
            registry=self.registry,
        )
        self.rejections = Counter(
            "svit_control_rejections_total", "Rejected control requests by failure code.",
            ["code"], registry=self.registry,
        )
        self.fenced = Counter(
            "svit_fenced_total", "Requests refused because the owner was fenced out.",
            registry=self.registry,
        )
        self.unavailable = Counter(
            "svit_unavailable_total", "Requests answered unavailable (retry).",
            registry=self.registry,
        )
        self.failovers = Counter(
            "svit_failovers_total", "Processes re-activated after their owner was lost.",
            registry=self.registry,
        )
        self.activations = Counter(
            "svit_activations_total", "Committed activations by owning host.",
            ["host"], registry=self.registry,
        )
        self.latency = Histogram(
            "svit_request_seconds", "Gateway request latency in seconds by endpoint.",
            ["endpoint"], registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self._host_gauges = {
            key: Gauge(name, doc, ["host"], registry=self.registry)
            for key, name, doc in _HOST_GAUGES
        }

    def observe_hosts(self, hosts: Iterable[Mapping[str, Any]]) -> None:
        """Set the ``svit_host_*`` gauges from a ``Router.hosts()`` answer; hosts
        no longer listed (or not answering) are dropped from every gauge."""
        seen: set[str] = set()
        for doc in hosts:
            host = str(doc.get("host"))
            if not doc.get("answered"):
                continue
            seen.add(host)
            for key, gauge in self._host_gauges.items():
                value = doc.get(key)
                if key == "lease_state":
                    value = 1.0 if value == "held" else 0.0
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    gauge.labels(host).set(value)
        for gauge in self._host_gauges.values():
            for labels in list(gauge._metrics):
                if labels[0] not in seen:
                    gauge.remove(*labels)


#: ``(Router.hosts() field, metric name, help)`` of the per-host gauges.
_HOST_GAUGES = (
    ("lease_state", "svit_host_lease_held", "1 while the host's lease is HELD, else 0."),
    ("keepalive_lag_s", "svit_host_keepalive_lag_seconds",
     "Start lag of the host lease's last keepalive round (s)."),
    ("max_keepalive_lag_s", "svit_host_keepalive_max_lag_seconds",
     "Largest keepalive start lag of the host's current lease (s)."),
    ("actors", "svit_host_active_actors", "Processes the host serves now."),
    ("max_active", "svit_host_max_active_actors", "The host's residency budget."),
    ("spares", "svit_host_warm_spares", "Warm, unbound process actors on the host."),
    ("starting", "svit_host_starting_workers", "Ray workers the host is starting."),
    ("pss_mib", "svit_host_actors_pss_mib", "Summed PSS of the host's process actors (MiB)."),
    ("lru_idle_s", "svit_host_lru_idle_seconds",
     "Idle seconds of the host's least recently used served process."),
    ("evictions", "svit_host_evictions", "Processes passivated at the budget (since start)."),
    ("host_full", "svit_host_full_answers", "Activations the host refused as full."),
)
