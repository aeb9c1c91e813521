"""After etcd was restored from a backup: raise the fence epoch, release stale owners.

What a restore does to ownership (etcd 3.4 cannot bump the revision on
restore): revisions restart at the backup's revision, so new fencing tokens
fall below the fences Redis already holds; the fence epoch, the ownership
records, the host registrations and their leases all come back as they were
at backup time (etcd renews every lease when it starts).

:func:`recover_after_restore` (``svit-cluster etcd-restored``) repairs that in
one pass:

1. Scan every Redis fence of the cluster's key prefix and raise the fence
   epoch past the highest one (and by at least one), so every token issued
   from now on is above every fence again.
2. Release (delete, guarded by create revision) every ownership record that
   is stale:

   * ``superseded`` -- its token is below its process's fence: a later owner
     claimed after the backup was taken, so this holder cannot commit anyway;
   * ``orphaned`` -- its host has no registration, or its registration is
     under another lease than the record (the host has rejoined since).

Records of a host that is registered under the record's lease and whose token
holds the fence are kept: that host may still serve them. A restored lease of
a host that no longer runs is not revoked here: nobody renews it, so it
expires one TTL after etcd started, with its records, exactly like a host
crash. (Even before that, :meth:`Owners.claim` releases a record whose token is
below the fence and recovers from a stale token in one call; this command only
does it for every process at once, so no claim has to.)
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from svit_cluster.ownership._epoch import epoch_past, raise_epoch, read_epoch
from svit_cluster.ownership._etcd import DEFAULT_REQUEST_TIMEOUT_S, etcd_call
from svit_cluster.ownership._keys import cluster_prefix, owners_prefix, parse_key
from svit_cluster.ownership._owner import record_token

__all__ = ["FenceScan", "RestoreReport", "recover_after_restore"]

log = logging.getLogger(__name__)


class FenceScan(Protocol):
    """Every ``(process_id, fence)`` of the cluster (:meth:`RedisFences.scan`)."""

    def scan(self) -> Iterable[tuple[str, int]]: ...


@dataclass(slots=True)
class RestoreReport:
    """What :func:`recover_after_restore` did.

    Attributes:
        epoch_before, epoch_after: the fence epoch before and after.
        highest_fence: the highest Redis fence found (0 when none).
        fences: how many fences were scanned.
        kept: ownership records left in place.
        released: ``{process_id: reason}`` of the records deleted
            (``superseded`` or ``orphaned``).
    """

    epoch_before: int = 0
    epoch_after: int = 0
    highest_fence: int = 0
    fences: int = 0
    kept: int = 0
    released: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {"epoch_before": self.epoch_before, "epoch_after": self.epoch_after,
                "highest_fence": self.highest_fence, "fences": self.fences,
                "kept": self.kept, "released": dict(sorted(self.released.items()))}


async def recover_after_restore(
    client: Any, cluster: str, fences: FenceScan, *,
    timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
) -> RestoreReport:
    """Raise the fence epoch past every fence and release stale ownership records.

    Safe to run at any time, and more than once (each run raises the epoch by
    one more; the epoch allows 8191). Run it after etcd was restored from a
    backup, before or while the hosts run.

    Args:
        client: an ``aetcd.Client`` for the restored etcd.
        cluster: cluster name.
        fences: the cluster's Redis fences (:class:`svit_cluster.store.RedisFences`).
        timeout_s: deadline of each etcd request, in seconds (default 2).

    Returns:
        A :class:`RestoreReport`.

    Raises:
        UnavailableError: etcd or Redis failed (running it again is safe).
        ConfigurationError: the epoch would exceed its bound, or it is unreadable.
    """
    report = RestoreReport()
    by_process = dict(await asyncio.to_thread(lambda: list(fences.scan())))
    report.fences = len(by_process)
    report.highest_fence = max(by_process.values(), default=0)
    report.epoch_before = await read_epoch(client, cluster, timeout_s=timeout_s)
    report.epoch_after = await raise_epoch(
        client, cluster, timeout_s=timeout_s,
        at_least=max(epoch_past(report.highest_fence), report.epoch_before + 1))
    got = await etcd_call("scan_cluster", client.get_prefix(cluster_prefix(cluster)),
                          timeout_s=timeout_s)
    hosts: dict[str, int] = {}
    records: list[tuple[bytes, bytes, int, int]] = []
    for kv in got:
        key = bytes(kv.key)
        kind = parse_key(cluster, key)
        if kind is not None and kind[0] == "host":
            hosts[kind[1]] = int(kv.lease)
        elif kind is not None and kind[0] == "owner":
            records.append((key, bytes(kv.value), int(kv.create_revision), int(kv.lease)))
    tx = client.transactions
    for key, value, revision, lease in records:
        process_id = key[len(owners_prefix(cluster)):].decode()
        try:
            host = str(json.loads(value)["host"])
        except (ValueError, KeyError, TypeError):
            host = ""
        token = record_token(value, revision)
        if token < by_process.get(process_id, 0):
            reason = "superseded"
        elif hosts.get(host) != lease:
            reason = "orphaned"
        else:
            report.kept += 1
            continue
        ok, _ = await etcd_call(
            "release_stale",
            client.transaction(compare=[tx.create(key) == revision],
                               success=[tx.delete(key)], failure=[]),
            timeout_s=timeout_s, outcome="unknown", process_id=process_id)
        if ok:
            report.released[process_id] = reason
            log.warning("released %s ownership record of %s (host %r, token %d)",
                        reason, process_id, host, token)
        else:
            report.kept += 1  # changed meanwhile: a newer record, left alone
    return report
