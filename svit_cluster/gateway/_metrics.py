"""Prometheus metrics for the gateway (``GET /metrics``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

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
