"""The read side of one process's log: head, entries, requests, re-synchronisation, restore.

:class:`LogReader` only reads; every call is safe to retry. A read that needs a
consistent view (``find_request``, ``catch_up``, ``restore``) takes it in one
``MULTI``/``EXEC``. Verification never repairs: a log that does not verify is
:class:`~svit_cluster.errors.CorruptData` (``corrupt_log``) naming the process
and version (the snapshot + tail checks are in :mod:`~svit_cluster.store._snapshots`).
A restore or re-synchronisation also tells the owner's
:class:`~svit_cluster.store._cadence.SnapshotCadence` how much tail lies above
the snapshot.
"""

from __future__ import annotations

import time

from svit_cluster.control import RequestStatus
from svit_cluster.errors import CorruptData, InvalidInput, NotFound
from svit_cluster.process import Process, Transaction
from svit_cluster.store._cadence import SnapshotCadence
from svit_cluster.store._keys import ProcessKeys, receipt_field
from svit_cluster.store._records import (
    Head,
    LogEntry,
    corrupt,
    parse_entry,
    parse_head,
    parse_snapshot,
)
from svit_cluster.store._redis import RedisClient, redis_boundary
from svit_cluster.store._snapshots import RestoreStats, verify_and_restore

__all__ = ["LogReader"]


class LogReader:
    """The reads of one process's log (any holder, no token needed).

    Args:
        client: a redis-py client.
        process_id: the ``svit://`` id.
        keys: the process's keys.
        cadence: the snapshot cadence a restore or re-synchronisation updates.
    """

    def __init__(self, client: RedisClient, process_id: str, keys: ProcessKeys,
                 cadence: SnapshotCadence) -> None:
        self._client = client
        self._process_id = process_id
        self._keys = keys
        self._cadence = cadence
        #: Statistics of the last :meth:`restore` (None before one).
        self.last_restore: RestoreStats | None = None

    def fence(self) -> int:
        """The stored fence (0 when nobody has claimed). Raises UnavailableError."""
        with redis_boundary("fence", self._process_id):
            raw = self._client.get(self._keys.fence)
        return 0 if raw is None else int(raw)

    def head(self) -> Head | None:
        """The durable head, or None if the process was never created.

        Raises:
            UnavailableError: Redis failed.  CorruptData: malformed head.
        """
        with redis_boundary("head", self._process_id):
            raw = self._client.hgetall(self._keys.head)
        return parse_head(self._process_id, raw)

    def entries(self, after_version: int = 0) -> list[LogEntry]:
        """Stream entries with version > ``after_version``, in order (tools, checkers).

        Raises:
            UnavailableError: Redis failed.  CorruptData: a malformed entry.
        """
        with redis_boundary("entries", self._process_id):
            raw = self._client.xrange(self._keys.stream, min=f"{after_version + 1}-0")
        return [parse_entry(self._process_id, eid, fields) for eid, fields in raw or ()]

    def find_request(
        self, tenant: str, client_id: str, request_id: str, *, head_version: int = 0
    ) -> RequestStatus:
        """Which retained stream entry, if any, ``(tenant, client_id, request_id)`` committed.

        Each entry names its committing request (field ``request``), so this
        answers for as long as the entry is retained: the stream keeps the
        entries after the latest snapshot plus ``trim_margin`` below it (so at
        least ``trim_margin`` and up to about ``snapshot_every + trim_margin``
        of the newest versions), which may be fewer than the receipts kept.
        Reads the stream and the head in one ``MULTI``/``EXEC`` view;
        ``head_version`` is unused (the durable head is read). Read-only; cost
        O(retained tail).

        Returns:
            :class:`~svit_cluster.control.RequestStatus`;
            ``retained_from_version`` is the oldest retained version from which
            every entry names its request (entries written before entries
            carried the field count as unknown), or head + 1 when none is.

        Raises:
            UnavailableError: Redis failed.
            CorruptData: a malformed entry or head.
            NotFound: the process was never created.
        """
        wanted = receipt_field(tenant, client_id, request_id)
        with redis_boundary("find_request", self._process_id):
            pipe = self._client.pipeline(transaction=True)
            pipe.xrange(self._keys.stream)
            pipe.hgetall(self._keys.head)
            raw, head_raw = pipe.execute()
        head = parse_head(self._process_id, head_raw)
        if head is None:
            raise NotFound(f"process {self._process_id} was never created in the store",
                           process_id=self._process_id)
        retained_from = head.version + 1
        found: int | None = None
        for eid, fields in reversed(raw or ()):
            entry = parse_entry(self._process_id, eid, fields)
            if entry.request is None:
                break  # written before entries named their request: unknown below
            retained_from = entry.version
            if entry.request == wanted and found is None:
                found = entry.version
        if found is not None:
            return RequestStatus(True, found, retained_from)
        return RequestStatus(False, None, retained_from)

    def catch_up(self, process: Process) -> Process:
        """Bring ``process`` (this owner's in-memory state) to the durable head.

        The re-synchronisation after a commit whose outcome is unknown (the
        controller's ``_resync``): reads head, fence and the stream entries
        after ``process.version`` in one ``MULTI``/``EXEC`` view. If the head
        did not move, nothing changes. If it moved, the entries up to the head
        are replayed into ``process`` in place, verified as in :meth:`restore`
        (consecutive versions, no token above the fence or below an earlier
        entry's, hash chain, root hashes, result equal to the head). If that
        tail was already trimmed below a newer snapshot, a full :meth:`restore`
        is returned instead. Read-only; safe to retry.

        Returns:
            ``process`` itself (advanced in place) or, after a trim, a freshly
            restored process at the head.

        Raises:
            CorruptData: (``corrupt_log``) the process was never created, the
                head is behind ``process`` or diverged from its chain at the
                same version, or the tail does not verify. Nothing changes.
            UnavailableError: Redis failed; nothing changes.
        """
        keys = self._keys
        with redis_boundary("catch_up", self._process_id):
            pipe = self._client.pipeline(transaction=True)
            pipe.hgetall(keys.head)
            pipe.get(keys.fence)
            pipe.xrange(keys.stream, min=f"{process.version + 1}-0")
            head_raw, fence_raw, tail_raw = pipe.execute()
        head = parse_head(self._process_id, head_raw)
        if head is None:
            raise corrupt(self._process_id, "durable head is missing on re-synchronisation")
        if head.version < process.version:
            raise corrupt(self._process_id, f"durable head {head.version} is behind the served "
                          f"version {process.version}", version=head.version)
        if head.version == process.version:
            if head.chain_head != process.chain_head or head.root_hash != process.root_hash:
                raise corrupt(self._process_id, f"durable head diverged from the served state "
                              f"at version {head.version}", version=head.version)
            return process
        entries = [parse_entry(self._process_id, eid, fields) for eid, fields in tail_raw or ()]
        entries = [e for e in entries if e.version <= head.version]
        if not entries or entries[0].version != process.version + 1:
            restored = self.restore()  # the tail was trimmed: start from the snapshot
            if restored is None:
                raise corrupt(self._process_id, "process vanished on re-synchronisation")
            return restored
        fence = 0 if fence_raw is None or not fence_raw.isdigit() else int(fence_raw)
        records: list[Transaction] = []
        last_token = 0
        for expected, entry in enumerate(entries, start=process.version + 1):
            if entry.version != expected:
                raise corrupt(self._process_id, f"missing stream entry at version {expected}",
                              version=expected)
            if entry.token < last_token or entry.token > fence:
                raise corrupt(self._process_id, f"token {entry.token} out of order or above the "
                              f"fence {fence} at version {entry.version}", version=entry.version)
            last_token = entry.token
            try:
                records.append(Transaction.decode(entry.record))
            except InvalidInput as exc:
                raise corrupt(self._process_id, f"undecodable record at version {entry.version}: "
                              f"{exc.message}", version=entry.version) from exc
        if entries[-1].version != head.version:
            raise corrupt(self._process_id, f"missing stream entry at version "
                          f"{entries[-1].version + 1}", version=entries[-1].version + 1)
        last = records[-1]
        if (last.event_hash != head.chain_head or last.resulting_root_hash != head.root_hash
                or last.position != head.position):
            raise corrupt(self._process_id, f"the entry at version {head.version} does not "
                          "match the stored head", version=head.version)
        served = process.version
        try:
            process.replay(records)  # all or nothing; verifies chain, steps and root hashes
        except CorruptData as exc:
            raise corrupt(self._process_id, f"re-synchronisation replay failed after version "
                          f"{served}: {exc.message}", version=served + 1) from exc
        self._cadence.add(len(records), sum(len(e.record) for e in entries))
        return process

    def restore(self) -> Process | None:
        """Rebuild the process from the latest snapshot and the stream tail.

        Reads snapshot, tail (entries after the snapshot), head and fence in one
        ``MULTI``/``EXEC`` view, then verifies and replays without guest code.
        Costs O(snapshot + tail), not O(history). Records statistics in
        :attr:`last_restore`. Safe to retry (read-only).

        Returns:
            The process at the durable head, or None
            if the process was never created.

        Raises:
            CorruptData: (``corrupt_log``) the log does not verify; the message
                and fields name the process and the version/position. Nothing
                is repaired.
            UnavailableError: Redis failed.
        """
        started = time.perf_counter()
        keys = self._keys
        with redis_boundary("restore", self._process_id):
            hint_raw = self._client.hget(keys.snapshot, "version")
            hint = int(hint_raw) if hint_raw is not None and hint_raw.isdigit() else 0
            pipe = self._client.pipeline(transaction=True)
            pipe.hgetall(keys.snapshot)
            pipe.xrange(keys.stream, min=f"{hint + 1}-0")
            pipe.hgetall(keys.head)
            pipe.get(keys.fence)
            snap_raw, tail_raw, head_raw, fence_raw = pipe.execute()
        snap = parse_snapshot(self._process_id, snap_raw)
        head = parse_head(self._process_id, head_raw)
        if snap is None and head is None:
            if tail_raw:
                raise corrupt(self._process_id, "stream entries without head or snapshot")
            return None
        if snap is None or head is None:
            raise corrupt(self._process_id, "head without snapshot or snapshot without head")
        if snap.version < hint:
            raise corrupt(self._process_id, f"snapshot went back from {hint} to {snap.version}",
                          version=snap.version)
        if fence_raw is not None and not fence_raw.isdigit():
            raise corrupt(self._process_id, "fence is not a decimal integer")
        fence = 0 if fence_raw is None else int(fence_raw)
        entries = [parse_entry(self._process_id, eid, fields) for eid, fields in tail_raw or ()]
        proc = verify_and_restore(self._process_id, snap, entries, head, fence)
        tail = [e for e in entries if e.version > snap.version]
        self._cadence.restored(proc.limits, len(tail), sum(len(e.record) for e in tail))
        self.last_restore = RestoreStats(
            snapshot_version=snap.version,
            snapshot_bytes=len(snap.data),
            tail_entries=len(tail),
            duration_s=time.perf_counter() - started,
        )
        return proc
