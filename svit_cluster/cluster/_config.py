"""Cluster configuration shared by host agents, process actors and gateways."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from svit_cluster.errors import ConfigurationError
from svit_cluster.store._redis import allow_unverified_from_env, cluster_from_env

__all__ = ["ClusterConfig"]


@dataclass(frozen=True)
class ClusterConfig:
    """Everything a component needs to join one svit cluster.

    Attributes:
        cluster: cluster name; etcd keys live under ``/svit/<cluster>/``.
        etcd_endpoint: ``host:port`` of etcd (control plane), or several
            members separated by commas (``open_client`` fails over between them).
        redis_url: ``redis://host:port/db`` of the commit log (data path).
        ray_address: ``host:port`` of the Ray GCS.
        lease_ttl_s: host lease TTL in seconds (default 5).
        snapshot_every: commits between snapshots (default 100).
        passivate_after_s: idle seconds before a process actor passivates (300).
        max_receipts: durable receipts per process (1..4096, default 256).
        call_timeout_s: gateway -> actor call deadline in seconds (default 5).
        warm_spares: unbound process actors each host agent keeps started
            (default 2). A failover onto a host takes a spare (bind and restore
            only); once a host's spares are used up, each further activation
            starts a Ray worker first, which costs seconds on a busy machine
            (issue 15: three processes failing over at once onto two hosts with
            one spare each took TTL + 9 s for the one that found no spare).
        host_endpoints: per-host overrides ``{host: {"etcd": ..., "redis": ...}}``
            (the chaos harness routes a host through its own proxies).
        unsafe_disable_fencing: TEST-ONLY negative control for the chaos
            checker; process actors then commit without the fence check. It is
            never read from cluster.json, the environment or a CLI flag: only
            ``LocalCluster.up(unsafe_disable_fencing=True)`` sets it, in Python.
        signal_retention: observer signals kept per process (default 10 000).
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
        reasoner: the reasoning loop's settings
            (``svit_cluster.reasoning.ReasonerConfig`` fields; default: the
            simulated reasoner). May hold an API key: kept out of ``repr``.
            From the environment: ``SVIT_REASONER_KIND``, ``_BASE_URL``,
            ``_MODEL``, ``_API_KEY_ENV``, ``_INSTRUCTIONS``.
        ports: the deployment's port registry settings
            (``svit_cluster.ports.PortsConfig``: which ports, allowlists,
            limits; default ``{}`` grants nothing). From ``cluster.json``
            ``ports`` or ``SVIT_PORTS_JSON``.
    """

    cluster: str = "local"
    etcd_endpoint: str = "127.0.0.1:2379"
    redis_url: str = "redis://127.0.0.1:6379/0"
    ray_address: str = ""
    lease_ttl_s: int = 5
    snapshot_every: int = 100
    passivate_after_s: float = 300.0
    max_receipts: int = 256
    call_timeout_s: float = 5.0
    warm_spares: int = 2
    host_endpoints: dict[str, dict[str, str]] = field(default_factory=dict)
    unsafe_disable_fencing: bool = False
    signal_retention: int = 10_000
    redis_allow_unverified_eviction_policy: bool = False
    redis_cluster: bool = False
    reasoner: dict[str, Any] = field(default_factory=dict, repr=False)
    ports: dict[str, Any] = field(default_factory=dict)

    @property
    def namespace(self) -> str:
        """The Ray namespace of this cluster's named actors."""
        return f"svit-{self.cluster}"

    def etcd_for(self, host: str) -> str:
        return self.host_endpoints.get(host, {}).get("etcd", self.etcd_endpoint)

    def redis_for(self, host: str) -> str:
        return self.host_endpoints.get(host, {}).get("redis", self.redis_url)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> ClusterConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in names})

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
            signal_retention=int(doc.get("signal_retention", 10_000)),
            reasoner=dict(doc.get("reasoner") or {}),
            ports=dict(doc.get("ports") or {}),
        )

    @classmethod
    def from_env(cls) -> ClusterConfig:
        """Read ``SVIT_*`` variables (the Helm chart's contract).

        Raises:
            ConfigurationError: a number does not parse.
        """
        env = os.environ
        try:
            return cls(
                cluster=env.get("SVIT_CLUSTER", "default"),
                # Every member: open_client fails over between them.
                etcd_endpoint=_etcd_endpoints(env.get("SVIT_ETCD_ENDPOINTS", "127.0.0.1:2379")),
                redis_url=env.get("SVIT_REDIS_URL", "redis://127.0.0.1:6379/0"),
                ray_address=env.get("SVIT_RAY_ADDRESS", ""),
                lease_ttl_s=int(env.get("SVIT_LEASE_TTL_S", "5")),
                snapshot_every=int(env.get("SVIT_SNAPSHOT_EVERY", "100")),
                passivate_after_s=float(env.get("SVIT_PASSIVATE_AFTER_S", "300")),
                signal_retention=int(env.get("SVIT_SIGNAL_RETENTION", "10000")),
                redis_allow_unverified_eviction_policy=allow_unverified_from_env(),
                redis_cluster=cluster_from_env(),
                reasoner={k: env[f"SVIT_REASONER_{k.upper()}"]
                          for k in ("kind", "base_url", "model", "api_key_env",
                                    "instructions")
                          if f"SVIT_REASONER_{k.upper()}" in env},
                ports=_ports_from_env(env.get("SVIT_PORTS_JSON", "")),
            )
        except ValueError as exc:
            raise ConfigurationError(f"bad SVIT_* setting: {exc}") from exc


def _ports_from_env(raw: str) -> dict[str, Any]:
    """``SVIT_PORTS_JSON`` (the Helm values' ``ports:`` block as JSON), validated.

    Raises:
        ConfigurationError: not a JSON object, or not a valid ``PortsConfig``.
    """
    if not raw.strip():
        return {}
    from svit_cluster.ports import PortsConfig

    try:
        doc = json.loads(raw)
    except ValueError:
        raise ConfigurationError("SVIT_PORTS_JSON is not JSON") from None
    if not isinstance(doc, dict):
        raise ConfigurationError("SVIT_PORTS_JSON must be a JSON object")
    PortsConfig.parse(doc)
    return doc


def _etcd_endpoints(raw: str) -> str:
    """``SVIT_ETCD_ENDPOINTS`` normalised to ``"h:p,h:p"`` (all members, order kept).

    Raises:
        ValueError: an entry is not ``host:port`` or the list is empty.
    """
    from svit_cluster.ownership._failover import parse_endpoints

    try:
        members = parse_endpoints(raw)
    except ValueError as exc:
        raise ValueError(f"SVIT_ETCD_ENDPOINTS: {exc}") from exc
    return ",".join(f"{host}:{port}" for host, port in members)
