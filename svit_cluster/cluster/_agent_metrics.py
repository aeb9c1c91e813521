"""Prometheus view of a host agent's residency (read at scrape time, no actor asked)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["ResidencyCollector"]


class ResidencyCollector(Collector):
    """Residency metrics of one :class:`~svit_cluster.cluster.HostAgent`.

    Gauges: ``svit_agent_active_actors`` (processes served here),
    ``svit_agent_max_active_actors`` (the budget), ``svit_agent_warm_spares``,
    ``svit_agent_starting_workers``, ``svit_agent_actors_pss_bytes`` (summed
    PSS at the last reading), ``svit_agent_lru_idle_seconds`` (idle time of the
    least recently used served process, from the last view). Counters:
    ``svit_agent_evictions_total`` (passivations at the budget or over the
    memory guard), ``svit_agent_host_full_total`` (activations refused as
    full), ``svit_agent_worker_starts_total``, ``svit_agent_worker_reuses_total``.

    Args:
        agent: the agent (its :meth:`residency`, ``actors`` and ``pool.spares``).
    """

    def __init__(self, agent: Any) -> None:
        self._agent = agent

    def collect(self) -> Iterator[Any]:
        agent = self._agent
        r = agent.residency()
        gauges = (
            ("svit_agent_active_actors", "Processes this host serves now.", len(agent.actors)),
            ("svit_agent_max_active_actors", "Process actors this host may run (budget).",
             r["max_active"]),
            ("svit_agent_warm_spares", "Warm, unbound process actors.", len(agent.pool.spares)),
            ("svit_agent_starting_workers", "Ray workers being started now.", r["starting"]),
            ("svit_agent_actors_pss_bytes", "Summed PSS of this host's process actors.",
             r["pss_mib"] * (1 << 20)),
            ("svit_agent_lru_idle_seconds",
             "Idle seconds of the least recently used served process.",
             r["lru_idle_s"] or 0.0),
        )
        for name, doc, value in gauges:
            yield GaugeMetricFamily(name, doc, value=float(value))
        counters = (
            ("svit_agent_evictions", "Processes passivated at the budget or memory guard.",
             r["evictions"]),
            ("svit_agent_host_full", "Activations refused: every actor busy at the budget.",
             r["host_full"]),
            ("svit_agent_worker_starts", "Ray workers started for process actors.",
             r["worker_starts"]),
            ("svit_agent_worker_reuses", "Bindings served by a reused worker.",
             r["worker_reuses"]),
        )
        for name, doc, value in counters:
            yield CounterMetricFamily(name, doc, value=float(value))
