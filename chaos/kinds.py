"""The nemesis kinds, and the sets of kinds the specs, the planner and the report use.

Every fault a schedule can hold is one of :data:`KINDS`. The sets below sort
the kinds by what they need (a named host, a topology) and by what they cause
(a failover, a host that stays down until restarted). They are pure data:
:mod:`svit_chaos.spec` validates specs against them, :mod:`svit_chaos.schedule`
plans with them, :mod:`svit_chaos.report` groups failovers by them. The
:data:`SCALED_KINDS` need ``--topology scaled``; the proxy and single-server kinds
(:data:`SINGLE_ONLY_KINDS`) need the single topology.
"""

from __future__ import annotations

__all__ = [
    "FAILOVER_KINDS",
    "HOST_KINDS",
    "KINDS",
    "OWNER_KINDS",
    "QUORUM_KINDS",
    "RESTART_KINDS",
    "SCALED_KINDS",
    "SINGLE_ONLY_KINDS",
]

#: Kinds of the scaled topology (a Redis Cluster with replicas, a 3-member etcd).
SCALED_KINDS = ("kill-redis-master", "kill-etcd-leader", "partition-etcd-member")
#: Kinds that take etcd's quorum away (several members needed). Never drawn by
#: ``random``: without a quorum no host keeps its lease, so every process stops
#: until the heal; it runs as its own scenario.
QUORUM_KINDS = ("kill-etcd-majority",)
#: Every nemesis kind (``stale-owner`` last: it is no scenario of its own).
KINDS = ("kill-host", "pause-host", "cut-etcd", "cut-redis", "slow-link", "kill-redis",
         "kill-etcd", "pause-owner", "stop-raylet", "kill-agent", "term-host", "pause-gcs",
         "etcd-restart-dead-host", "load-host", *SCALED_KINDS, *QUORUM_KINDS, "stale-owner")
#: Kinds that need the single topology: per-host proxies, or the one redis-server / etcd.
SINGLE_ONLY_KINDS = frozenset({"cut-etcd", "cut-redis", "slow-link", "kill-redis",
                               "kill-etcd", "etcd-restart-dead-host"})
#: Kinds that fault one host.
HOST_KINDS = frozenset({"kill-host", "pause-host", "cut-etcd", "cut-redis", "slow-link",
                        "stop-raylet", "kill-agent", "term-host", "etcd-restart-dead-host",
                        "load-host"})
#: Kinds after which processes of the faulted host move to a new owner.
FAILOVER_KINDS = frozenset({"kill-host", "pause-host", "cut-etcd", "pause-owner",
                            "stop-raylet", "kill-agent", "term-host",
                            "etcd-restart-dead-host"})
#: Kinds that leave the host down until ``restart_host`` (dead for good without it;
#: a raylet stopped past Ray's node timeout exits when resumed).
RESTART_KINDS = frozenset({"kill-host", "kill-agent", "term-host", "etcd-restart-dead-host",
                           "stop-raylet"})
#: Kinds that fault a host chosen when injected (the owner of a process), not by the schedule.
OWNER_KINDS = frozenset({"pause-owner"})
