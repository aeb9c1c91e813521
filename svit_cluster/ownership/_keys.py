"""The etcd key layout of one cluster, in one place.

Every component that reads or writes the control plane's etcd names its keys
here: the agent registering its host, the owners' records, the route cache and
placement reading both, the restore procedure scanning them, the local status
view and the chaos observer.

======================================  ============================================
key                                     value, lifetime
======================================  ============================================
``/svit/<cluster>/owners/<process>``    ``{"host", "address", "epoch"?}``; under the
                                        owning host's lease (its create revision and
                                        epoch make the fencing token)
``/svit/<cluster>/hosts/<host>``        the host's registration (JSON: ``host``,
                                        ``node_id``, ``warm``, ``active``,
                                        ``spares``, ``ready`` ...); under
                                        the host lease
``/svit/<cluster>/fence-epoch``         the fencing-token epoch (decimal); no lease
======================================  ============================================
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "cluster_prefix",
    "epoch_key",
    "host_key",
    "hosts_prefix",
    "owner_key",
    "owners_prefix",
    "parse_key",
]


def cluster_prefix(cluster: str) -> bytes:
    """``/svit/<cluster>/``: every key of the cluster (one ``get_prefix`` or watch)."""
    return f"/svit/{cluster}/".encode()


def owners_prefix(cluster: str) -> bytes:
    """``/svit/<cluster>/owners/``: every ownership record."""
    return cluster_prefix(cluster) + b"owners/"


def owner_key(cluster: str, process_id: str) -> bytes:
    """The etcd key ``/svit/<cluster>/owners/<process_id>``."""
    return owners_prefix(cluster) + process_id.encode()


def hosts_prefix(cluster: str) -> bytes:
    """``/svit/<cluster>/hosts/``: every live host registration."""
    return cluster_prefix(cluster) + b"hosts/"


def host_key(cluster: str, host: str) -> bytes:
    """The etcd key ``/svit/<cluster>/hosts/<host>``."""
    return hosts_prefix(cluster) + host.encode()


def epoch_key(cluster: str) -> bytes:
    """The etcd key ``/svit/<cluster>/fence-epoch`` (no lease)."""
    return cluster_prefix(cluster) + b"fence-epoch"


def parse_key(cluster: str, key: bytes) -> tuple[Literal["owner", "host"], str] | None:
    """``("owner", process id)`` or ``("host", host name)`` for a key of ``cluster``;
    None for any other key (the epoch key, another cluster's, an unknown kind)."""
    owners, hosts = owners_prefix(cluster), hosts_prefix(cluster)
    if key.startswith(owners):
        return "owner", key[len(owners):].decode()
    if key.startswith(hosts):
        return "host", key[len(hosts):].decode()
    return None
