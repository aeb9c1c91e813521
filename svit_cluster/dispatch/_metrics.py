"""Prometheus metrics of one dispatcher worker (its own registry)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["DispatchMetrics"]


class DispatchMetrics:
    """Counters, gauges and a histogram in one registry per worker.

    Names:
        ``svit_dispatch_delivered_total{sink}`` -- intents a sink confirmed.
        ``svit_dispatch_retried_total{sink}`` -- attempts that failed and were retried.
        ``svit_dispatch_dead_lettered_total{sink,reason}`` -- intents sent to the
            dead-letter stream.
        ``svit_dispatch_reclaimed_total`` -- pending entries taken over from
            another consumer (``XAUTOCLAIM``).
        ``svit_dispatch_missing_total`` -- pending entries whose stream entry was
            deleted (cannot be delivered; logged).
        ``svit_dispatch_fenced_total{write}`` -- writes (``ack``, ``dead_letter``)
            refused because a newer claim holder exists, or (dead letters) the
            entry was already acknowledged.
        ``svit_dispatch_lag{process}`` -- entries of an owned outbox stream not yet
            acknowledged (never read + pending).
        ``svit_dispatch_trimmed_total`` -- source-stream entries removed by the
            trim after acknowledgement (every consumer group acknowledged them).
        ``svit_dispatch_dead_trimmed_total{bound}`` -- dead letters removed by the
            dead-letter stream's bounds (``bound``: ``age`` or ``count``) in
            this worker's writes and scans.
        ``svit_dispatch_settled_pruned_total`` -- ``<stream>:dead-settled``
            fields deleted because their letter left the dead-letter stream.
        ``svit_dispatch_owned_streams`` -- streams this worker holds a claim on.
        ``svit_dispatch_delay_seconds{sink}`` -- commit -> confirmed delivery (Redis
            commit time vs this worker's clock).
        ``svit_dispatch_timers_pending`` -- timers parked in the streams this
            worker holds (as of each stream's last timer script).
        ``svit_dispatch_timers_armed_total`` -- delayed intents parked.
        ``svit_dispatch_timers_fired_total`` -- timers delivered (sink confirmed).
        ``svit_dispatch_timers_cancelled_total{outcome}`` -- committed cancels
            applied, by outcome (``cancelled``, ``too_late``,
            ``already_cancelled``, ``unknown``).
        ``svit_dispatch_timer_lateness_seconds`` -- confirmed delivery minus due
            time (Redis clock), per fired timer.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.delivered = Counter("svit_dispatch_delivered_total",
                                 "Intents confirmed by their sink.", ["sink"], registry=r)
        self.retried = Counter("svit_dispatch_retried_total",
                               "Failed delivery attempts that were retried.", ["sink"],
                               registry=r)
        self.dead_lettered = Counter("svit_dispatch_dead_lettered_total",
                                     "Intents moved to the dead-letter stream.",
                                     ["sink", "reason"], registry=r)
        self.reclaimed = Counter("svit_dispatch_reclaimed_total",
                                 "Pending entries reclaimed from another consumer.", registry=r)
        self.missing = Counter("svit_dispatch_missing_total",
                               "Pending entries whose stream entry no longer exists.",
                               registry=r)
        self.fenced = Counter("svit_dispatch_fenced_total",
                              "Writes refused by the claim fence (or an already settled entry).",
                              ["write"], registry=r)
        self.lag = Gauge("svit_dispatch_lag",
                         "Unacknowledged entries of an owned source stream.", ["process"],
                         registry=r)
        self.trimmed = Counter("svit_dispatch_trimmed_total",
                               "Source-stream entries trimmed once every group acknowledged them.",
                               registry=r)
        self.dead_trimmed = Counter("svit_dispatch_dead_trimmed_total",
                                    "Dead letters removed by the dead-letter stream's bounds.",
                                    ["bound"], registry=r)
        self.settled_pruned = Counter("svit_dispatch_settled_pruned_total",
                                      "Dead-settled fields deleted after their letter left.",
                                      registry=r)
        self.owned = Gauge("svit_dispatch_owned_streams",
                           "Source streams this worker holds a claim on.", registry=r)
        self.delay = Histogram(
            "svit_dispatch_delay_seconds", "Commit to confirmed delivery, seconds.", ["sink"],
            registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
        )
        self.timers_pending = Gauge("svit_dispatch_timers_pending",
                                    "Timers parked in the streams this worker holds.",
                                    registry=r)
        self.timers_armed = Counter("svit_dispatch_timers_armed_total",
                                    "Delayed intents parked until due.", registry=r)
        self.timers_fired = Counter("svit_dispatch_timers_fired_total",
                                    "Timers delivered (sink confirmed).", registry=r)
        self.timers_cancelled = Counter("svit_dispatch_timers_cancelled_total",
                                        "Committed timer cancels, by outcome.", ["outcome"],
                                        registry=r)
        self.timer_lateness = Histogram(
            "svit_dispatch_timer_lateness_seconds",
            "Confirmed delivery of a timer minus its due time, seconds.", registry=r,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
        )
