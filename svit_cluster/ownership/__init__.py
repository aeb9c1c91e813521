"""Fenced process ownership on etcd (DESIGN.md §3), asyncio control plane.

Public names, by importance:

* :class:`HostLease` -- one lease per host with a background keepalive loop.
* :class:`LeaseState` -- HELD / SUSPENDED / LOST, documented by what a holder
  may assume in each.
* :class:`Owners` -- acquire (one ``create_revision == 0`` transaction; the
  fencing token is the create revision), release (only if still ours),
  ``owner_of``, ``guard`` (self-fencing check for the data path), ``watch``.
* :class:`Ownership`, :class:`OwnerRecord` -- this host's ownership; any owner.
* :class:`OwnershipWatch` -- reports when ownership is lost.
* :func:`open_client` -- an ``aetcd.Client`` for ``host:port``.

The lease is never the proof of ownership: the fencing token checked by the
Redis commit log is (:mod:`svit_cluster.store`).
"""

from svit_cluster.ownership._etcd import DEFAULT_REQUEST_TIMEOUT_S, open_client
from svit_cluster.ownership._lease import DEFAULT_TTL_S, HostLease, LeaseState
from svit_cluster.ownership._owner import OwnerRecord, Owners, Ownership, owner_key
from svit_cluster.ownership._watch import OwnershipWatch

__all__ = [
    "DEFAULT_REQUEST_TIMEOUT_S",
    "DEFAULT_TTL_S",
    "HostLease",
    "LeaseState",
    "OwnerRecord",
    "Owners",
    "Ownership",
    "OwnershipWatch",
    "open_client",
    "owner_key",
]
