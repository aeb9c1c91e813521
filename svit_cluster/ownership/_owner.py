"""Process ownership records in etcd: acquire, release, look up.

The record of process ``P`` is the key ``/svit/<cluster>/owners/<P>`` (every key:
:mod:`svit_cluster.ownership._keys`), put under
the owning host's lease with the value ``{"host": ..., "address": ...}``. It is
created in one transaction guarded by ``create_revision == 0``, so at most one
host holds it at a time. Its **fencing token** is ``epoch << 40 | create
revision`` (:mod:`svit_cluster.ownership._epoch`): etcd revisions only grow, so
every acquisition anywhere in the cluster gets a larger token than every
earlier one -- except after etcd is restored from a backup, when revisions go
back; raising the fence epoch restores the order (:meth:`Owners.claim` does it
when a claim is fenced, ``svit-cluster etcd-restored`` does it for the whole
cluster). That token -- not the lease -- is what the Redis commit log checks
(see :mod:`svit_cluster.store`).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any, Protocol

from svit_cluster.errors import (
    ConfigurationError,
    ConflictError,
    FencedError,
    InvalidInput,
    UnavailableError,
)
from svit_cluster.ownership._epoch import (
    epoch_past,
    fencing_token,
    raise_epoch,
)
from svit_cluster.ownership._etcd import etcd_call
from svit_cluster.ownership._keys import epoch_key, owner_key
from svit_cluster.ownership._lease import HostLease
from svit_cluster.ownership._record import Ownership
from svit_cluster.process import validate_process_id

__all__ = ["Fences", "OwnerRecord", "Owners", "Ownership", "record_token"]

log = logging.getLogger(__name__)

_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


def _value_epoch(value: Any) -> int:
    epoch = value.get("epoch", 0) if isinstance(value, dict) else 0
    return epoch if type(epoch) is int and epoch >= 0 else 0


def record_token(value: bytes, create_revision: int) -> int:
    """The fencing token of an ownership record: its value's ``epoch`` (0 when
    absent or unreadable) and its create revision (see ``_epoch``)."""
    try:
        epoch = _value_epoch(json.loads(value))
    except ValueError:
        epoch = 0
    return fencing_token(epoch, create_revision)


class Fences(Protocol):
    """Where fencing tokens are checked: the Redis commit log
    (:class:`svit_cluster.store.RedisFences` is the implementation)."""

    async def fence(self, process_id: str) -> int:
        """The stored fence of ``process_id`` (0 when never claimed)."""
        ...

    async def claim(self, process_id: str, token: int) -> int:
        """Raise the fence to ``token``; raise :class:`FencedError` (field
        ``fence``) when the fence is already higher."""
        ...


@dataclass(frozen=True, slots=True)
class OwnerRecord:
    """Who owns a process, as stored in etcd.

    Attributes:
        process_id: the process.
        host, address: from the record's value.
        token: the fencing token (record epoch and create revision).
        lease_id: the owning host's lease.
        revision: the record's etcd create revision.
    """

    process_id: str
    host: str
    address: str
    token: int
    lease_id: int
    revision: int


class Owners:
    """Acquire and release process ownership for one host under its lease.

    Args:
        lease: the host's granted :class:`HostLease` (its client is used).
        cluster: cluster name, ``[A-Za-z0-9._-]{1,64}``.
        host: this host's name (stored in the record).
        address: how to reach this host (stored in the record; default "").

    Raises:
        ConfigurationError: bad cluster or host name.
    """

    def __init__(self, lease: HostLease, *, cluster: str, host: str, address: str = "") -> None:
        if not _NAME.fullmatch(cluster) or not _NAME.fullmatch(host):
            raise ConfigurationError("cluster and host names must match [A-Za-z0-9._-]{1,64}")
        self.lease = lease
        self.cluster = cluster
        self.host = host
        self.address = address
        #: The fence epoch new records are created in (learned from etcd; 0 first).
        self._epoch = 0

    def _value(self, epoch: int) -> bytes:
        return json.dumps({"address": self.address, "epoch": epoch, "host": self.host},
                          sort_keys=True).encode()

    @property
    def _timeout_s(self) -> float:
        return self.lease.request_timeout_s

    def _record(self, process_id: str, kv: Any) -> OwnerRecord:
        epoch = 0
        try:
            value = json.loads(kv.value)
            host, address = str(value["host"]), str(value.get("address", ""))
            epoch = _value_epoch(value)
        except (ValueError, KeyError, TypeError):
            host, address = "?", ""
        revision = int(kv.create_revision)
        return OwnerRecord(process_id, host, address, fencing_token(epoch, revision),
                           int(kv.lease), revision)

    async def acquire(self, process_id: str) -> Ownership:
        """Become the owner of ``process_id`` in one etcd transaction.

        The record is created in the current fence epoch (the transaction also
        compares the epoch key, so a concurrent raise is never missed).

        Guarantee: on success this host's record exists under its lease and
        ``token`` is larger than any earlier token of any process in the
        cluster (after an etcd restore, only once the epoch was raised: see
        :meth:`claim`). Retrying after ``unavailable`` is safe: if the first
        attempt won, the retry (same ``address``) returns that same ownership
        (same lease, same token). A record under this host's lease that names
        another address is replaced (a new token): its actor was given other
        work after that earlier outcome was unknown, and a route to it would
        never reach this process.

        Returns:
            The :class:`Ownership`; next, claim the Redis fence with its token
            (or use :meth:`claim`, which does both).

        Raises:
            ConflictError: another host owns it (fields ``owner_host``,
                ``owner_address``, ``token``, ``revision``).
            UnavailableError: the lease is not HELD (self-fencing), or etcd failed.
            ConfigurationError: the revision or epoch no longer fits a token.
            InvalidInput: bad process id.
        """
        validate_process_id(process_id)
        self.lease.ensure_held()
        lease_id = self.lease.lease_id
        client = self.lease.client
        key = owner_key(self.cluster, process_id)
        ekey = epoch_key(self.cluster)
        tx = client.transactions
        for _ in range(4):
            epoch = self._epoch
            same_epoch = (tx.version(ekey) == 0 if epoch == 0
                          else tx.value(ekey) == str(epoch).encode())
            ok, responses = await etcd_call(
                "acquire",
                client.transaction(
                    compare=[tx.create(key) == 0, same_epoch],
                    success=[tx.put(key, self._value(epoch), lease=lease_id), tx.get(key)],
                    failure=[tx.get(key), tx.get(ekey)],
                ),
                timeout_s=self._timeout_s,
                outcome="unknown",
                process_id=process_id,
            )
            found = responses[-1] if ok else responses[0]
            if found:
                record = self._record(process_id, found[0][1])
                if not ok and record.lease_id == lease_id and record.address != self.address:
                    # This host's own record, naming another actor: an earlier
                    # claim whose outcome was unknown here, its actor since
                    # given other work. Nobody serves it: replace it.
                    log.warning("replacing this host's record of %s naming %r (token %d)",
                                process_id, record.address, record.token)
                    await self._delete_if(key, record.revision)
                    continue
                if ok or record.lease_id == lease_id:
                    return Ownership(process_id, record.token, self.host, self.address,
                                     record.lease_id, key, record.revision)
                raise ConflictError(
                    f"{process_id} is owned by host {record.host!r} (token {record.token})",
                    process_id=process_id,
                    owner_host=record.host,
                    owner_address=record.address,
                    token=record.token,
                    revision=record.revision,
                )
            # No record: the epoch changed since we last read it. Learn it and retry.
            current = responses[1]
            raw = bytes(current[0][1].value) if current else b"0"
            if not raw.isdigit():
                raise ConfigurationError(f"fence epoch key holds {raw[:32]!r}")
            self._epoch = int(raw)
        raise UnavailableError(f"the fence epoch kept changing during acquire of {process_id}",
                               op="acquire", process_id=process_id)

    async def claim(self, process_id: str, fences: Fences, *, rounds: int = 4) -> Ownership:
        """Acquire ``process_id`` and claim its fence, recovering from tokens below
        the fence (etcd restored from a backup) within this one call.

        * Acquired, but the claim is fenced (fence > token) while our record
          still stands: the etcd revisions went back. The fence epoch is raised
          past the fence (a compare-and-set transaction guarded by our record's
          create revision), the record is released and acquired again with a
          token above the fence, and claimed.
        * Another host's record whose token is below the process's fence: a
          later owner has already claimed, so the record is stale (left by a
          restore); it is released (guarded by its create revision) and the
          acquisition retried.

        Args:
            process_id: the process.
            fences: the Redis fences (:class:`svit_cluster.store.RedisFences`).
            rounds: acquisition attempts (default 4; a recovery needs at most 3).

        Returns:
            The :class:`Ownership`, whose token now holds the Redis fence.

        Raises:
            ConflictError: another host owns it with a valid token (fields as
                for :meth:`acquire`).
            UnavailableError: etcd or Redis failed (retrying is safe), the lease
                is not HELD, or the ownership kept changing for ``rounds`` rounds.
            FencedError: only from a ``fences`` whose error has no integer
                ``fence`` field (a stale token is always recovered from).
            InvalidInput: the fence cannot be claimed for ``process_id`` at all
                (e.g. an id the store cannot key); the record acquired for it
                is released first.
        """
        for _ in range(rounds):
            try:
                ownership = await self.acquire(process_id)
            except ConflictError as exc:
                token, revision = exc.fields.get("token"), exc.fields.get("revision")
                if not isinstance(token, int) or not isinstance(revision, int):
                    raise
                fence = await fences.fence(process_id)
                if fence <= token:
                    raise
                log.warning("ownership record of %s (host %s, token %d) is below the fence "
                            "%d: stale (etcd restored?); releasing it", process_id,
                            exc.fields.get("owner_host"), token, fence)
                await self._delete_if(owner_key(self.cluster, process_id), revision)
                continue
            try:
                await fences.claim(process_id, ownership.token)
                return ownership
            except InvalidInput:
                # A claim that can never succeed (an id the store cannot key):
                # the record just acquired must not outlive this call.
                await self.release(ownership)
                raise
            except FencedError as exc:
                above = exc.fields.get("fence")
                if not isinstance(above, int):
                    raise
                try:
                    self._epoch = await raise_epoch(
                        self.lease.client, self.cluster, at_least=epoch_past(above),
                        timeout_s=self._timeout_s, guard=(ownership.key, ownership.revision))
                except ConflictError:
                    continue  # our record went meanwhile: the next acquire reports the owner
                log.warning("token %d of %s is below the fence %d (etcd restored?); "
                            "fence epoch is now %d, acquiring again", ownership.token,
                            process_id, above, self._epoch)
                await self.release(ownership)
        raise UnavailableError(f"ownership of {process_id} kept changing during claim; retry",
                               op="claim", process_id=process_id)

    async def _delete_if(self, key: bytes, revision: int) -> bool:
        client = self.lease.client
        tx = client.transactions
        ok, _ = await etcd_call(
            "release_stale",
            client.transaction(compare=[tx.create(key) == revision],
                               success=[tx.delete(key)], failure=[]),
            timeout_s=self._timeout_s,
            outcome="unknown",
        )
        return bool(ok)

    async def release(self, ownership: Ownership) -> bool:
        """Delete the record only if it is still this ownership (same create revision).

        Returns:
            True if deleted; False if it was already gone or belongs to a newer
            owner (which is left untouched).

        Raises:
            UnavailableError: etcd failed (retrying is safe).
        """
        client = self.lease.client
        tx = client.transactions
        ok, _ = await etcd_call(
            "release",
            client.transaction(
                compare=[tx.create(ownership.key) == ownership.revision],
                success=[tx.delete(ownership.key)],
                failure=[],
            ),
            timeout_s=self._timeout_s,
            outcome="unknown",
            process_id=ownership.process_id,
        )
        return bool(ok)

    async def owner_of(self, process_id: str) -> OwnerRecord | None:
        """The current owner record of ``process_id``, or None.

        Raises:
            UnavailableError: etcd failed.
        """
        validate_process_id(process_id)
        got = await etcd_call("get_owner", self.lease.client.get(owner_key(self.cluster,
                                                                           process_id)),
                              timeout_s=self._timeout_s, process_id=process_id)
        return None if got is None else self._record(process_id, got)

    async def release_unserved(self, process_id: str) -> bool:
        """Delete ``process_id``'s record if it is under this host's lease; for a
        host that finds a record it does not serve (for example one that an etcd
        restore brought back under a lease the host still renews).

        The caller must know it does not serve the process (no actor, no
        activation in progress). Guarded by the record's create revision.

        Returns:
            True if a record was deleted.

        Raises:
            UnavailableError: etcd failed (retrying is safe).
            InvalidInput: bad process id.
        """
        record = await self.owner_of(process_id)
        if record is None or record.lease_id != self.lease.lease_id:
            return False
        deleted = await self._delete_if(owner_key(self.cluster, process_id), record.revision)
        if deleted:
            log.warning("released the record of %s (token %d): under this host's lease but "
                        "not served here", process_id, record.token)
        return deleted
