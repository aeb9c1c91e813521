"""Fenced process ownership on etcd, asyncio control plane (``docs/architecture.md``).

Public names, by importance:

* :class:`HostLease` -- one lease per host with a background keepalive loop.
* :class:`KeptLease` -- a host lease held by a keeper process of its own (what
  host agents use: nothing inside the agent can starve the keepalives).
* :class:`LeaseState` -- HELD / SUSPENDED / LOST, documented by what a holder
  may assume in each.
* :class:`Owners` -- acquire (one ``create_revision == 0`` transaction; the
  fencing token is ``epoch << 40 | create revision``), ``claim`` (acquire and
  claim the Redis fence, recovering in one call from tokens below the fence
  after an etcd restore), release (only if still ours), ``owner_of`` (the
  etcd record of any process), ``release_unserved``.
* :func:`recover_after_restore` -- the operator's step after restoring etcd
  from a backup (``svit-cluster etcd-restored``): raise the fence epoch past
  every fence, release stale ownership records.
* :func:`fencing_token`, :func:`split_token`, :data:`EPOCH_SHIFT` -- the token
  format and its bounds (exact below 2**53, as Redis Lua numbers need).
* :class:`Ownership`, :class:`OwnerRecord` -- this host's ownership; any owner.
* :func:`open_client` -- an ``aetcd.Client`` for ``host:port``.
* The etcd key layout, defined once (``_keys``): :func:`owner_key`,
  :func:`host_key`, :func:`epoch_key`, their prefixes, :func:`parse_key`.

The lease is never the proof of ownership: the fencing token checked by the
Redis commit log is (:mod:`svit_cluster.store`).
"""

from svit_cluster.ownership._epoch import (
    EPOCH_SHIFT,
    MAX_EPOCH,
    MAX_REVISION,
    fencing_token,
    read_epoch,
    split_token,
)
from svit_cluster.ownership._etcd import DEFAULT_REQUEST_TIMEOUT_S, etcd_call, open_client
from svit_cluster.ownership._failover import parse_endpoints
from svit_cluster.ownership._kept import KeptLease, KeptLeaseCollector
from svit_cluster.ownership._keys import (
    cluster_prefix,
    epoch_key,
    host_key,
    hosts_prefix,
    owner_key,
    owners_prefix,
    parse_key,
)
from svit_cluster.ownership._lease import (
    DEFAULT_TTL_S,
    HostLease,
    LeaseMetrics,
    LeaseState,
    judge_state,
    revoke_lease_id,
)
from svit_cluster.ownership._owner import (
    Fences,
    OwnerRecord,
    Owners,
    Ownership,
    record_token,
)
from svit_cluster.ownership._restore import RestoreReport, recover_after_restore

__all__ = [
    "DEFAULT_REQUEST_TIMEOUT_S",
    "DEFAULT_TTL_S",
    "EPOCH_SHIFT",
    "MAX_EPOCH",
    "MAX_REVISION",
    "Fences",
    "HostLease",
    "KeptLease",
    "KeptLeaseCollector",
    "LeaseMetrics",
    "LeaseState",
    "OwnerRecord",
    "Owners",
    "Ownership",
    "RestoreReport",
    "cluster_prefix",
    "epoch_key",
    "etcd_call",
    "fencing_token",
    "host_key",
    "hosts_prefix",
    "judge_state",
    "open_client",
    "owner_key",
    "owners_prefix",
    "parse_endpoints",
    "parse_key",
    "read_epoch",
    "record_token",
    "recover_after_restore",
    "revoke_lease_id",
    "split_token",
]
