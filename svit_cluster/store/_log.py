"""The fenced Redis commit log of one process, seen by one owner (one token).

:class:`RedisBackend` implements the controller's
:class:`~svit_cluster.control._backend.CommitBackend` (receipts + atomic
commit) plus what an owner needs around it: claim, create, restore and
snapshots. It is thread-safe (redis-py pools connections); commits to one
process must still be serialized by its owner, as the process itself is.

It is a front: it composes the owner's
:class:`~svit_cluster.store._fenced_runner.FencedRunner` (identity, guard,
``WAIT``, fence verdicts), the
:class:`~svit_cluster.store._log_writer.LogWriter` (claim, receipts, commit,
snapshots), the :class:`~svit_cluster.store._log_admin.LogAdmin` (create,
residency, delete) and the :class:`~svit_cluster.store._log_reader.LogReader`
(head, entries, requests, catch-up, restore), which share the receipts in
memory (:mod:`~svit_cluster.store._receipts`) and the snapshot cadence
(:mod:`~svit_cluster.store._cadence`). Each method's full contract is on the
part that implements it.

Guarantees, per call:

* **commit** -- on success the record, its receipt, its outbox intents, the
  new head and the ``committed`` signal (plus, for an inbox acknowledge, its
  ``completion`` signal) are stored together, in one Lua script, under a token
  no lower than the fence. On ``FencedError``/``ConflictError``/``NotFound`` nothing was
  stored. On ``UnavailableError`` with ``fields["outcome"] == "unknown"`` the
  commit may or may not have happened: retrying the *same request id* is safe
  (the receipt replays); re-sealing and committing anew is not (it conflicts
  or, if the first attempt failed, commits once).
* **claim** -- raises the fence to this token (atomic max) and loads the
  process's receipts (at most ``max_receipts``) into memory, in the same
  script; safe to retry.
* **get_receipt** -- after a claim, answered from memory, without a round trip:
  while this token is the fence this owner is the only writer of the receipts
  (every receipt write is the fenced commit or put_receipt script of a token
  >= the fence), so the copy loaded at the claim plus every receipt this owner
  stored since is exactly what Redis holds, with the same FIFO eviction. The
  copy is discarded when a write's outcome is unknown (``UnavailableError``) or
  the durable head moved unexpectedly (reloaded, fenced, before the next
  answer), and for good once a script reports the fence above this token
  (every later call raises ``FencedError``; a stale owner never answers from
  it).
* **restore** / **catch_up** -- read-only; safe to retry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from svit_cluster.control import Receipt, RequestStatus
from svit_cluster.errors import InvalidInput
from svit_cluster.process import Process, Transition
from svit_cluster.store._cadence import SnapshotCadence
from svit_cluster.store._commit_args import CommitArgs
from svit_cluster.store._fenced_runner import FencedRunner, Guard
from svit_cluster.store._keys import ProcessKeys
from svit_cluster.store._log_admin import LogAdmin
from svit_cluster.store._log_config import StoreConfig
from svit_cluster.store._log_reader import LogReader
from svit_cluster.store._log_writer import LogWriter
from svit_cluster.store._records import Head, LogEntry
from svit_cluster.store._redis import RedisClient
from svit_cluster.store._snapshots import RestoreStats

__all__ = ["RedisBackend"]


class RedisBackend:
    """The commit log of one process for the owner holding fencing ``token``.

    Args:
        client: a redis-py client (see :func:`svit_cluster.store.connect`).
        process_id: the ``svit://`` id (no braces).
        token: this owner's fencing token (``svit_cluster.ownership``: fence epoch and
            etcd create revision), >= 1.
        config: :class:`StoreConfig` (defaults as documented there).
        guard: optional check run before every commit, receipt and snapshot
            write; it raises to refuse (e.g. the host lease is not HELD).

    Raises:
        InvalidInput: (``invalid_process_id``) bad id; bad token.
    """

    #: This backend appends observer signals with every commit and accepts a
    #: ``completion`` (``ProcessController.complete_turn``, the reasoning loop's end of turn).
    emits_signals = True

    def __init__(
        self,
        client: RedisClient,
        process_id: str,
        token: int,
        config: StoreConfig | None = None,
        *,
        guard: Guard | None = None,
    ) -> None:
        if type(token) is not int or token < 1:
            raise InvalidInput(f"fencing token must be a positive integer, got {token!r}")
        self.config = config or StoreConfig()
        self.keys = ProcessKeys(process_id, self.config.prefix)
        self.process_id = process_id
        self.token = token
        runner = FencedRunner(client, process_id, token, self.keys, self.config, guard)
        cadence = SnapshotCadence(self.config.snapshot_every,
                                  self.config.snapshot_max_tail_bytes)
        self._client = client
        #: The registered scripts (one object, shared by every part).
        self._scripts = runner.scripts
        self._writer = LogWriter(runner, cadence)
        self._admin = LogAdmin(runner, cadence)
        self._reader = LogReader(client, process_id, self.keys, cadence)
        #: The commit script's KEYS.
        self._commit_keys = self._writer.commit_keys
        self._lane = runner.lane

    def close(self) -> None:
        """Close this owner's own Redis connection (``StoreConfig.dedicated_connection``)
        for good, without waiting for a script that is running (it closes the
        connection when it ends); idempotent. A later write raises
        ``unavailable`` before sending anything. The shared client stays open."""
        if self._lane is not None:
            self._lane.close()

    @property
    def last_restore(self) -> RestoreStats | None:
        """Statistics of the last :meth:`restore` (None before one)."""
        return self._reader.last_restore

    # -- ownership and receipts (LogWriter) ------------------------------------------

    def claim(self, *, load_receipts: bool = True) -> int:
        """Raise the stored fence to this token; see :meth:`LogWriter.claim`."""
        return self._writer.claim(load_receipts=load_receipts)

    def fence(self) -> int:
        """The stored fence (0 when nobody has claimed); see :meth:`LogReader.fence`."""
        return self._reader.fence()

    def get_receipt(self, tenant: str, client_id: str, request_id: str) -> Receipt | None:
        """The stored receipt for the key, or None; see :meth:`LogWriter.get_receipt`."""
        return self._writer.get_receipt(tenant, client_id, request_id)

    def put_receipt(self, receipt: Receipt, *, version: int) -> None:
        """Store a conflict or rejected receipt (fenced); see :meth:`LogWriter.put_receipt`."""
        self._writer.put_receipt(receipt, version=version)

    # -- commit and snapshots (LogWriter) ----------------------------------------------

    def _commit_args(
        self,
        transition: Transition,
        receipt: Receipt | None,
        intents: Sequence[dict[str, Any]],
        completion: Mapping[str, Any] | None,
    ) -> CommitArgs:
        """The commit script's arguments (``benchmarks/bench_store`` times the bare
        script with them); see :meth:`LogWriter.commit_args`."""
        return self._writer.commit_args(transition, receipt, intents, completion)

    def commit(
        self,
        transition: Transition,
        receipt: Receipt | None = None,
        intents: Sequence[dict[str, Any]] = (),
        *,
        completion: Mapping[str, Any] | None = None,
    ) -> None:
        """Durably commit ``transition`` with its receipt and outbox intents,
        atomically; see :meth:`LogWriter.commit`."""
        self._writer.commit(transition, receipt, intents, completion=completion)

    def snapshot(self, process: Process) -> bool:
        """Store a snapshot of ``process`` (at the durable head), fenced; see
        :meth:`LogWriter.snapshot`."""
        return self._writer.snapshot(process)

    # -- create, residency, delete (LogAdmin) ------------------------------------------

    def create(self, process: Process) -> None:
        """Store ``process`` as the start of a new log, fenced; see :meth:`LogAdmin.create`."""
        self._admin.create(process)

    def residency(self) -> dict[str, float]:
        """The process's residency settings; see :meth:`LogAdmin.residency`."""
        return self._admin.residency()

    def set_residency(self, name: str, value: float | None) -> None:
        """Set (or with None remove) a residency setting, fenced; see
        :meth:`LogAdmin.set_residency`."""
        self._admin.set_residency(name, value)

    def delete(self) -> dict[str, Any]:
        """Delete the process from the store, fenced; see :meth:`LogAdmin.delete`."""
        return self._admin.delete()

    # -- read side (LogReader) -----------------------------------------------------------

    def head(self) -> Head | None:
        """The durable head, or None; see :meth:`LogReader.head`."""
        return self._reader.head()

    def entries(self, after_version: int = 0) -> list[LogEntry]:
        """Stream entries with version > ``after_version``; see :meth:`LogReader.entries`."""
        return self._reader.entries(after_version)

    def find_request(
        self, tenant: str, client_id: str, request_id: str, *, head_version: int = 0
    ) -> RequestStatus:
        """Which retained stream entry, if any, the request committed; see
        :meth:`LogReader.find_request`."""
        return self._reader.find_request(tenant, client_id, request_id,
                                         head_version=head_version)

    def catch_up(self, process: Process) -> Process:
        """Bring ``process`` to the durable head; see :meth:`LogReader.catch_up`."""
        return self._reader.catch_up(process)

    def restore(self) -> Process | None:
        """Rebuild the process from the latest snapshot and the stream tail; see
        :meth:`LogReader.restore`."""
        return self._reader.restore()
