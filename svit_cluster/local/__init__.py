"""Local, single-machine cluster: server launchers, Ray nodes and the whole cluster.

Public names:

* :class:`LocalCluster`, :class:`ClusterSpec` -- ``svit-cluster up`` / ``down``.
* :class:`RedisServer` -- a durable (AOF, fsync always) redis-server on a free port.
* :class:`RedisClusterServer` -- a local Redis Cluster (M masters x R replicas).
* :class:`EtcdServer` -- a single-member etcd on free ports.
* :class:`EtcdClusterServer` -- a local etcd cluster of 3 (or 5) members.
* :class:`RayNode`, :class:`PortAllocator` -- Ray nodes started one after another.
* :class:`ServerError` -- a server could not be started (``unavailable``).
* :func:`free_port` -- a free loopback TCP port.
* :func:`cluster_status` -- gateway, hosts and owners of a running local cluster.
"""

from typing import TYPE_CHECKING, Any

from svit_cluster.local._ray import PortAllocator, RayNode, ray_env
from svit_cluster.local._rcluster import (
    EtcdClusterServer,
    EtcdMember,
    RedisClusterNode,
    RedisClusterServer,
)
from svit_cluster.local._servers import (
    EtcdServer,
    RedisServer,
    ServerError,
    free_port,
    stop_pid,
)

if TYPE_CHECKING:
    from svit_cluster.local._cluster import ClusterSpec, LocalCluster
    from svit_cluster.local._status import cluster_status

__all__ = [
    "ClusterSpec",
    "EtcdClusterServer",
    "EtcdMember",
    "EtcdServer",
    "LocalCluster",
    "PortAllocator",
    "RayNode",
    "RedisClusterNode",
    "RedisClusterServer",
    "RedisServer",
    "ServerError",
    "cluster_status",
    "free_port",
    "ray_env",
    "stop_pid",
]


def __getattr__(name: str) -> Any:
    """Import the :mod:`svit_cluster.local._cluster` names on first use (PEP 562).

    ``_cluster`` imports httpx, click and rich (the CLI's status and health checks);
    the CLI's lighter commands import this package and need not pay for
    them (tests/cluster/test_worker_imports.py).

    Raises:
        AttributeError: ``name`` is not a public name of this package.
    """
    if name in ("ClusterSpec", "LocalCluster"):
        from svit_cluster.local import _cluster

        return getattr(_cluster, name)
    if name == "cluster_status":
        from svit_cluster.local import _status

        return _status.cluster_status
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
