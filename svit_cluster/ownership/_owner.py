"""Process ownership records in etcd: acquire, release, look up (DESIGN.md §3).

The record of process ``P`` is the key ``/svit/<cluster>/owners/<P>``, put under
the owning host's lease with the value ``{"host": ..., "address": ...}``. It is
created in one transaction guarded by ``create_revision == 0``, so at most one
host holds it at a time, and its **create revision is the fencing token**: etcd
revisions only grow, so every acquisition anywhere in the cluster gets a larger
token than every earlier one. That token -- not the lease -- is what the Redis
commit log checks (see :mod:`svit_cluster.store`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from svit_cluster.errors import ConfigurationError, ConflictError, InvalidInput
from svit_cluster.ownership._etcd import etcd_call
from svit_cluster.ownership._lease import HostLease
from svit_cluster.process import validate_process_id

if TYPE_CHECKING:
    from svit_cluster.ownership._watch import OwnershipWatch

__all__ = ["OwnerRecord", "Owners", "Ownership", "owner_key"]

_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


def owner_key(cluster: str, process_id: str) -> bytes:
    """The etcd key ``/svit/<cluster>/owners/<process_id>``."""
    return f"/svit/{cluster}/owners/{process_id}".encode()


@dataclass(frozen=True, slots=True)
class OwnerRecord:
    """Who owns a process, as stored in etcd.

    Attributes:
        process_id: the process.
        host, address: from the record's value.
        token: the record's create revision (the fencing token).
        lease_id: the owning host's lease.
    """

    process_id: str
    host: str
    address: str
    token: int
    lease_id: int


@dataclass(frozen=True, slots=True)
class Ownership:
    """This host's ownership of one process, with its fencing token.

    Valid while the record exists with this ``token``; see
    :class:`~svit_cluster.ownership.OwnershipWatch` and the host lease's state.
    """

    process_id: str
    token: int
    host: str
    address: str
    lease_id: int
    key: bytes


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
        self._value = json.dumps({"address": address, "host": host}, sort_keys=True).encode()

    @property
    def _timeout_s(self) -> float:
        return self.lease.request_timeout_s

    def _record(self, process_id: str, kv: Any) -> OwnerRecord:
        try:
            value = json.loads(kv.value)
            host, address = str(value["host"]), str(value.get("address", ""))
        except (ValueError, KeyError, TypeError):
            host, address = "?", ""
        return OwnerRecord(process_id, host, address, int(kv.create_revision), int(kv.lease))

    async def acquire(self, process_id: str) -> Ownership:
        """Become the owner of ``process_id`` in one etcd transaction.

        Guarantee: on success this host's record exists under its lease and
        ``token`` is larger than any earlier token of any process in the
        cluster. Retrying after ``unavailable`` is safe: if the first attempt
        won, the retry returns that same ownership (same lease, same token).

        Returns:
            The :class:`Ownership`; next, claim the Redis fence with its token.

        Raises:
            ConflictError: another host owns it (fields ``owner_host``,
                ``owner_address``, ``token``).
            UnavailableError: the lease is not HELD (self-fencing), or etcd failed.
            InvalidInput: bad process id.
        """
        validate_process_id(process_id)
        self.lease.ensure_held()
        lease_id = self.lease.lease_id
        client = self.lease.client
        key = owner_key(self.cluster, process_id)
        tx = client.transactions
        ok, responses = await etcd_call(
            "acquire",
            client.transaction(
                compare=[tx.create(key) == 0],
                success=[tx.put(key, self._value, lease=lease_id), tx.get(key)],
                failure=[tx.get(key)],
            ),
            timeout_s=self._timeout_s,
            outcome="unknown",
            process_id=process_id,
        )
        found = responses[-1]
        if not found:  # deleted between the compare and the get: cannot happen in one txn
            raise ConflictError(f"ownership of {process_id} changed during acquire",
                                process_id=process_id)
        record = self._record(process_id, found[0][1])
        if ok or record.lease_id == lease_id:
            return Ownership(process_id, record.token, self.host, self.address,
                             record.lease_id, key)
        raise ConflictError(
            f"{process_id} is owned by host {record.host!r} (token {record.token})",
            process_id=process_id,
            owner_host=record.host,
            owner_address=record.address,
            token=record.token,
        )

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
                compare=[tx.create(ownership.key) == ownership.token],
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

    def guard(
        self, ownership: Ownership, watch: OwnershipWatch | None = None
    ) -> Callable[[], None]:
        """A no-argument check for the data path: raises unless still safe to start work.

        Pass it as ``RedisBackend(..., guard=owners.guard(ownership, watch))`` so
        a SUSPENDED or LOST host, or one whose watch saw the record go, stops
        starting commits (self-fencing; the Redis fence remains the proof).
        Callable from any thread.

        Raises:
            InvalidInput: ``ownership`` was not acquired under this host's lease.
        """
        if ownership.lease_id != self.lease.lease_id:
            raise InvalidInput("ownership does not belong to this host's lease")
        lease = self.lease

        def check() -> None:
            lease.ensure_held()
            if watch is not None:
                watch.ensure_owned()

        return check

    def watch(self, ownership: Ownership) -> OwnershipWatch:
        """Start an :class:`OwnershipWatch` for ``ownership`` (must run on the event loop)."""
        from svit_cluster.ownership._watch import OwnershipWatch

        return OwnershipWatch(self.lease, ownership).start()
