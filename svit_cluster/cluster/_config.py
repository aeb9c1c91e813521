"""Cluster configuration shared by host agents, process actors and gateways."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from svit_cluster.control import DEFAULT_RECEIPTS
from svit_cluster.defaults import (
    DEFAULT_CLUSTER,
    DEFAULT_ETCD_ENDPOINT,
    DEFAULT_LEASE_TTL_S,
    DEFAULT_MAX_ACTIVE_PER_HOST,
    DEFAULT_MAX_ACTORS_PSS_MIB,
    DEFAULT_MAX_EVENTS,
    DEFAULT_MAX_STARTING_PER_HOST,
    DEFAULT_MAX_WARM_SPARES,
    DEFAULT_PASSIVATE_AFTER_S,
    DEFAULT_REDIS_URL,
    DEFAULT_SIGNAL_RETENTION,
    DEFAULT_WARM_SPARES,
    LEASE_NICENESS,
)
from svit_cluster.errors import ConfigurationError
from svit_cluster.store import DEFAULT_SNAPSHOT_EVERY
from svit_cluster.values import JsonValue

if TYPE_CHECKING:  # pydantic-settings loads only where the environment is read
    from svit_cluster.settings import ClusterSettings

__all__ = ["AGENT_NICENESS", "KEEPER_NICENESS", "PROCESS_ACTOR_NICENESS", "WORKER_NICENESS_ENV",
           "ClusterConfig", "host_resource", "lower_priority"]

#: Scheduling niceness of every host agent's worker (and of the lease keeper it
#: starts, when the host does not allow the keeper a higher priority): above the
#: process actors it starts and serves, like the raylet beside it. At 0 it
#: weighs as much as about 28 workers at 15 (CFS weights 1024 vs 36).
AGENT_NICENESS = 0
#: Scheduling niceness of every process actor's worker once it is warm (Ray's
#: default ``worker_niceness``): below the agent and the lease keeper, so
#: serving load cannot starve the lease. Set by the actor itself
#: (:func:`lower_priority`).
PROCESS_ACTOR_NICENESS = 15
#: Niceness the host's lease keeper asks for (``svit_cluster.ownership.KeptLease``):
#: above the agent and far above process actors, so that neither serving load
#: nor starting workers delay a keepalive (:data:`~svit_cluster.defaults.LEASE_NICENESS`,
#: which the local etcd runs at too). Without ``CAP_SYS_NICE`` the keeper keeps
#: the agent's niceness and logs so.
KEEPER_NICENESS = LEASE_NICENESS
#: The environment every Ray node of a cluster starts with (``svit_cluster.local``
#: and ``deploy/svit-node.sh``): Ray's core worker renices itself to
#: ``RAY_worker_niceness`` at start, so every worker starts at the agent's
#: niceness; process actors then lower their own priority. Not a per-actor
#: ``runtime_env``: Ray hands a creator's runtime_env down to the actors it
#: creates, and a worker with one cannot come from Ray's prestarted pool.
WORKER_NICENESS_ENV = {"RAY_worker_niceness": str(AGENT_NICENESS)}


def lower_priority(niceness: int) -> int:
    """Raise the niceness of every thread of this process to ``niceness`` (never
    lowers one, which would need privilege); returns the calling thread's.

    Linux keeps a niceness per thread (``setpriority(PRIO_PROCESS, tid)``), so
    each of ``/proc/self/task`` is set; threads started later inherit their
    creator's. Elsewhere only the calling thread (``os.nice``) is changed.
    """
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = []
    for tid in tids:
        try:
            if os.getpriority(os.PRIO_PROCESS, tid) < niceness:
                os.setpriority(os.PRIO_PROCESS, tid, niceness)
        except OSError:  # the thread ended meanwhile
            continue
    now = os.nice(0)
    return os.nice(niceness - now) if niceness > now else now


def host_resource(host: str) -> str:
    """The Ray custom resource that pins actors to host ``host`` (``svit_host:<host>``).

    Every Ray node of a host advertises it (``ray start --resources``, done by
    whoever starts the node: ``svit_cluster.local`` or ``deploy/svit-node.sh``), and the
    host's agent and actors request one unit of it.
    """
    return f"svit_host:{host}"


@dataclass(frozen=True)
class ClusterConfig:
    """Everything a component needs to join one svit cluster.

    The defaults it shares with :class:`~svit_cluster.settings.ClusterSettings`
    (an empty environment builds this same config) are constants of
    :mod:`svit_cluster.defaults`, where their units and ranges are stated.

    Attributes:
        cluster: cluster name; etcd keys live under ``/svit/<cluster>/``
            (``defaults.DEFAULT_CLUSTER``; a dev cluster records its own name,
            ``defaults.LOCAL_CLUSTER``, in ``cluster.json``).
        etcd_endpoint: ``host:port`` of etcd (control plane), or several
            members separated by commas (``open_client`` fails over between them;
            ``defaults.DEFAULT_ETCD_ENDPOINT``).
        redis_url: ``redis://host:port/db`` of the commit log (data path;
            ``defaults.DEFAULT_REDIS_URL``).
        ray_address: ``host:port`` of the Ray GCS.
        lease_ttl_s: host lease TTL in seconds (``defaults.DEFAULT_LEASE_TTL_S``).
        snapshot_every: commits between snapshots (``defaults.DEFAULT_SNAPSHOT_EVERY``).
        passivate_after_s: idle seconds before a process actor passivates
            (``defaults.DEFAULT_PASSIVATE_AFTER_S``).
        max_receipts: durable receipts per process (1..4096,
            ``control.DEFAULT_RECEIPTS``).
        call_timeout_s: gateway -> actor call deadline in seconds (default 5).
        warm_spares: unbound process actors each host agent keeps started
            at least (``defaults.DEFAULT_WARM_SPARES``). A failover onto a host
            takes a spare (bind and restore only); once a host's spares are
            used up, each further activation starts a Ray worker first, which
            costs seconds on a busy machine (a process failing over onto a
            host with no spare left takes seconds longer than the lease TTL).
        max_warm_spares: the most spares a host keeps for a peer's failover
            (``defaults.DEFAULT_MAX_WARM_SPARES``; cluster.json
            ``max_warm_spares``). Each agent keeps ``ceil(busiest peer's
            processes / (live hosts - 1))`` spares within
            ``[warm_spares, max(warm_spares, max_warm_spares)]`` and its
            residency budget (:mod:`svit_cluster.cluster._headroom`).
        host_endpoints: per-host overrides ``{host: {"etcd": ..., "redis": ...}}``
            (the chaos harness routes a host through its own proxies).
        backend_factory: how process actors build their commit backend, as an
            import path ``"module:callable"``
            (``svit_cluster.store.load_backend_factory``); ``""`` (default): the
            fenced ``RedisBackend``. Never read from cluster.json or the
            environment: only the chaos negative control sets it
            (``LocalCluster.up(unsafe_disable_fencing=True)`` passes the
            unfenced test factory of ``svit_cluster.store.testing`` through the
            bootstrap driver), so production code never imports that module.
        signal_retention: observer signals kept per process
            (``defaults.DEFAULT_SIGNAL_RETENTION``; ``SVIT_SIGNAL_RETENTION``,
            cluster.json ``signal_retention``).
        max_events: canonical reasoning events kept per session of a process
            (``defaults.DEFAULT_MAX_EVENTS``; ``SVIT_MAX_EVENTS``,
            cluster.json ``max_events``).
        redis_allow_unverified_eviction_policy: start against a Redis whose
            ``maxmemory-policy`` cannot be read (``CONFIG`` disabled, as on some
            managed services), with a warning; the operator vouches that it is
            ``noeviction``. Env ``SVIT_REDIS_ALLOW_UNVERIFIED_EVICTION_POLICY``
            (default False: such a Redis is refused, as is any evicting one).
        redis_cluster: ``redis_url`` names a node of a Redis Cluster; every
            component then connects with a cluster client
            (``svit_cluster.store.connect(cluster=True)``). Env
            ``SVIT_REDIS_CLUSTER`` (the chart's ``redis.external.cluster``);
            cluster.json ``redis.cluster`` (default False).
        reasoner: the reasoning loop's settings, a JSON object
            (``svit_cluster.reasoning.ReasonerConfig`` fields; default: the
            simulated reasoner). May hold an API key: kept out of ``repr``.
            From the environment: ``SVIT_REASONER_KIND``, ``_BASE_URL``,
            ``_MODEL``, ``_API_KEY_ENV``, ``_INSTRUCTIONS``.
        ports: the deployment's port registry settings, a JSON object
            (``svit_cluster.ports.PortsConfig``: which ports, allowlists,
            limits; default ``{}`` grants nothing). From ``cluster.json``
            ``ports`` or ``SVIT_PORTS_JSON``.
        mounts: the deployment's mount grants, a JSON list
            (``svit_cluster.mounts.MountsConfig``: which mounts, their
            sources, which processes get them; default ``[]`` mounts
            nothing). From ``cluster.json`` ``mounts`` or ``SVIT_MOUNTS_JSON``.
            May hold a database DSN: kept out of ``repr``.
        direct_transport: the gateway sends control requests to a process
            actor over the actor's own socket (Ray stays the control plane;
            :mod:`svit_cluster.cluster._direct`), falling back to a Ray call
            when that socket cannot be reached (default True; cluster.json
            ``direct_transport``).
        max_active_per_host: the residency budget: process actors (bound or
            warm spare) one host runs at once; at the budget the least
            recently used idle one is passivated for a new one, and a host
            whose actors are all busy answers ``host_full``. 0
            (``defaults.DEFAULT_MAX_ACTIVE_PER_HOST``):
            derived from the host's Ray node CPUs and memory
            (:func:`svit_cluster.cluster._residency.derive_budget`).
            ``svit-cluster up --max-active-per-host``, env
            ``SVIT_MAX_ACTIVE_PER_HOST``, chart ``ray.workers.residency.maxActive``.
        max_actors_pss_mib: the memory guard: the summed PSS (MiB) of a
            host's process actors at which it counts as full (0: half the
            node's memory). Env ``SVIT_MAX_ACTORS_PSS_MIB``.
        max_starting_per_host: Ray workers a host starts at once, the rest
            wait (0: half the node's CPUs, at least 1). Env
            ``SVIT_MAX_STARTING_PER_HOST``.
    """

    cluster: str = DEFAULT_CLUSTER
    etcd_endpoint: str = DEFAULT_ETCD_ENDPOINT
    redis_url: str = DEFAULT_REDIS_URL
    ray_address: str = ""
    lease_ttl_s: int = DEFAULT_LEASE_TTL_S
    snapshot_every: int = DEFAULT_SNAPSHOT_EVERY
    passivate_after_s: float = DEFAULT_PASSIVATE_AFTER_S
    max_receipts: int = DEFAULT_RECEIPTS
    call_timeout_s: float = 5.0
    warm_spares: int = DEFAULT_WARM_SPARES
    max_warm_spares: int = DEFAULT_MAX_WARM_SPARES
    host_endpoints: dict[str, dict[str, str]] = field(default_factory=dict)
    backend_factory: str = ""
    signal_retention: int = DEFAULT_SIGNAL_RETENTION
    max_events: int = DEFAULT_MAX_EVENTS
    redis_allow_unverified_eviction_policy: bool = False
    redis_cluster: bool = False
    reasoner: dict[str, JsonValue] = field(default_factory=dict, repr=False)
    ports: dict[str, JsonValue] = field(default_factory=dict)
    mounts: list[JsonValue] = field(default_factory=list, repr=False)
    direct_transport: bool = True
    max_active_per_host: int = DEFAULT_MAX_ACTIVE_PER_HOST
    max_actors_pss_mib: float = DEFAULT_MAX_ACTORS_PSS_MIB
    max_starting_per_host: int = DEFAULT_MAX_STARTING_PER_HOST

    @property
    def namespace(self) -> str:
        """The Ray namespace of this cluster's named actors."""
        return f"svit-{self.cluster}"

    def etcd_for(self, host: str) -> str:
        return self.host_endpoints.get(host, {}).get("etcd", self.etcd_endpoint)

    def redis_for(self, host: str) -> str:
        return self.host_endpoints.get(host, {}).get("redis", self.redis_url)

    @classmethod
    def from_cluster_json(cls, path: str | Path) -> ClusterConfig:
        """Read a local cluster's ``cluster.json`` (written by ``svit-cluster up``)."""
        doc = json.loads(Path(path).read_text())
        return cls(
            cluster=doc["cluster"],
            etcd_endpoint=doc["etcd"]["endpoint"],
            redis_url=doc["redis"]["url"],
            redis_cluster=bool(doc["redis"].get("cluster", False)),
            ray_address=doc["ray"]["address"],
            lease_ttl_s=int(doc["lease_ttl_s"]),
            snapshot_every=int(doc["snapshot_every"]),
            passivate_after_s=float(doc["passivate_after_s"]),
            host_endpoints={h: v["endpoints"] for h, v in doc.get("hosts", {}).items()
                            if v.get("endpoints")},
            signal_retention=int(doc.get("signal_retention", DEFAULT_SIGNAL_RETENTION)),
            max_events=int(doc.get("max_events", DEFAULT_MAX_EVENTS)),
            reasoner=dict(doc.get("reasoner") or {}),
            ports=dict(doc.get("ports") or {}),
            mounts=list(doc.get("mounts") or []),
            direct_transport=bool(doc.get("direct_transport", True)),
            max_active_per_host=int(doc.get("max_active_per_host",
                                            DEFAULT_MAX_ACTIVE_PER_HOST)),
            max_actors_pss_mib=float(doc.get("max_actors_pss_mib",
                                             DEFAULT_MAX_ACTORS_PSS_MIB)),
            max_starting_per_host=int(doc.get("max_starting_per_host",
                                              DEFAULT_MAX_STARTING_PER_HOST)),
            max_warm_spares=int(doc.get("max_warm_spares", DEFAULT_MAX_WARM_SPARES)),
        )

    @classmethod
    def from_env(cls) -> ClusterConfig:
        """Read ``SVIT_*`` variables (the Helm chart's contract), via
        :class:`svit_cluster.settings.ClusterSettings` (names, defaults, ranges).

        Raises:
            ConfigurationError: a variable does not parse or is out of range;
                the message names it.
        """
        from svit_cluster.settings import ClusterSettings, load_settings

        return cls.from_settings(load_settings(ClusterSettings))

    @classmethod
    def from_settings(cls, env: ClusterSettings) -> ClusterConfig:
        """The config of validated :class:`~svit_cluster.settings.ClusterSettings`.

        Raises:
            ConfigurationError: ``SVIT_PORTS_JSON`` is not a valid port registry
                (``svit_cluster.ports.PortsConfig``); the message names it.
        """
        from svit_cluster.mounts import MountsConfig
        from svit_cluster.ports import PortsConfig

        try:
            PortsConfig.parse(env.ports())
        except ConfigurationError as exc:
            raise ConfigurationError(
                f"bad setting SVIT_PORTS_JSON: {exc.message}") from None
        try:
            MountsConfig.parse(env.mounts())
        except ConfigurationError as exc:
            raise ConfigurationError(
                f"bad setting SVIT_MOUNTS_JSON: {exc.message}") from None
        return cls(
            cluster=env.cluster,
            etcd_endpoint=env.etcd_endpoints,  # every member: open_client fails over
            redis_url=env.redis_url,
            ray_address=env.ray_address,
            lease_ttl_s=env.lease_ttl_s,
            snapshot_every=env.snapshot_every,
            passivate_after_s=env.passivate_after_s,
            signal_retention=env.signal_retention,
            max_events=env.max_events,
            redis_allow_unverified_eviction_policy=env.redis_allow_unverified_eviction_policy,
            redis_cluster=env.redis_cluster,
            reasoner=env.reasoner(),
            ports=env.ports(),
            mounts=env.mounts(),
            max_active_per_host=env.max_active_per_host,
            max_actors_pss_mib=env.max_actors_pss_mib,
            max_starting_per_host=env.max_starting_per_host,
        )
