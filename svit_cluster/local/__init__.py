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
"""

from svit_cluster.local._cluster import ClusterSpec, LocalCluster, stop_pid
from svit_cluster.local._ray import PortAllocator, RayNode, host_resource, ray_env
from svit_cluster.local._rcluster import (
    EtcdClusterServer,
    EtcdMember,
    RedisClusterNode,
    RedisClusterServer,
)
from svit_cluster.local._servers import EtcdServer, RedisServer, ServerError, free_port

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
    "free_port",
    "host_resource",
    "ray_env",
    "stop_pid",
]
