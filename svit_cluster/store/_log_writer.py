"""The fenced commit path of one owner: claim, receipts, commit and snapshots.

:class:`LogWriter` holds what the controller's
:class:`~svit_cluster.control._backend.CommitBackend` needs (receipts + atomic
commit) and the claim and snapshots around it. Every write runs through the
owner's :class:`~svit_cluster.store._fenced_runner.FencedRunner` (guard,
eviction check, ``WAIT``, fence verdict). Rules it keeps:

* a commit stores the record, its receipt, its outbox intents, the new head
  and its signals together in one script (``COMMIT``), or nothing; on an
  unknown outcome or an unexpected head the receipts in memory are discarded,
  so the next :meth:`LogWriter.get_receipt` reloads them, fenced;
* after a claim, receipts are answered from memory (see
  :mod:`~svit_cluster.store._receipts`); without one, from Redis;
* a snapshot is stored after ``snapshot_every`` commits or
  ``snapshot_max_tail_bytes`` of records (:mod:`~svit_cluster.store._cadence`);
  a failed snapshot is logged and retried after the next commit, never failing
  the commit.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from svit_cluster.control import Receipt
from svit_cluster.errors import (
    ConflictError,
    FencedError,
    NotFound,
    SvitError,
    UnavailableError,
)
from svit_cluster.process import Process, Transition
from svit_cluster.store._cadence import SnapshotCadence
from svit_cluster.store._commit_args import CommitArgs, commit_keys
from svit_cluster.store._fenced_runner import FencedRunner
from svit_cluster.store._keys import receipt_field
from svit_cluster.store._records import corrupt, decode_receipt, encode_receipt
from svit_cluster.store._redis import redis_boundary, refusal_reason
from svit_cluster.store._snapshots import limits_of, process_after

__all__ = ["LogWriter"]

log = logging.getLogger(__name__)


class LogWriter:
    """The fenced writes of one owner on one process's log (commit path).

    Args:
        runner: the owner's identity and script runner (shared with the reader).
        cadence: the snapshot cadence (shared with the reader, whose restores set it).
    """

    def __init__(self, runner: FencedRunner, cadence: SnapshotCadence) -> None:
        self._runner = runner
        self._cadence = cadence
        self.commit_keys = commit_keys(runner.keys)
        self._claimed = False

    # -- ownership -----------------------------------------------------------------

    def claim(self, *, load_receipts: bool = True) -> int:
        """Raise the stored fence to this token (atomic max). Safe to retry.

        With ``load_receipts`` (the owner's claim) the same script returns the
        process's receipts (at most ``max_receipts``, FIFO order), which
        :meth:`get_receipt` then answers from memory; with ``wait_replicas``
        the fence is written even when unchanged, so the ``WAIT`` confirms that
        the replicas hold every loaded receipt. ``load_receipts=False`` is the
        bare claim (``RedisFences``: the host agent's claim for ownership).

        Returns:
            The fence after the claim (this token).

        Raises:
            FencedError: a higher token has already claimed or committed
                (fields ``token`` and ``fence``); nothing changed.
            UnavailableError: Redis failed; or (``reason`` ``replication``)
                fewer than ``wait_replicas`` replicas acknowledged the raise
                within ``wait_timeout_ms`` (retrying is safe).
        """
        r = self._runner
        if load_receipts:
            rest = self._claim_load(claim=True)
            self._claimed = True
            return int(rest[0])
        with redis_boundary("claim", r.process_id):
            reply = r.run("claim", r.scripts.claim, [r.keys.fence], [r.token])
        _, rest = r.verdict(reply, "claim")
        return int(rest[0])

    def _claim_load(self, *, claim: bool) -> list[Any]:
        """Run ``CLAIM_LOAD`` (``claim``: raise the fence; else only check it) and
        install the returned receipts in memory. Returns the reply after the status.

        Raises:
            FencedError: the fence is above this token (memory discarded for good).
            UnavailableError: Redis failed (or too few replicas acknowledged); the
                receipts stay unloaded.
        """
        r = self._runner
        keys = r.keys
        # A reload only rewrites the fence with its own value: no outcome to doubt.
        op, outcome = ("claim", "unknown") if claim else ("get_receipt", "none")
        with redis_boundary(op, r.process_id):
            reply = r.run(op, r.scripts.claim_load,
                          [keys.fence, keys.receipts, keys.receipts_order],
                          [r.token, "1" if claim else "0",
                           "1" if r.config.wait_replicas else "0"], outcome=outcome)
        _, rest = r.verdict(reply, op)
        r.receipts.install(list(reply[2]), list(reply[3]))
        return rest

    # -- receipts (CommitBackend) ---------------------------------------------------

    def get_receipt(self, tenant: str, client_id: str, request_id: str) -> Receipt | None:
        """The stored receipt for the key, or None (never stored or evicted).

        After :meth:`claim` the answer comes from memory (no round trip; see
        :mod:`~svit_cluster.store._receipts`); if the memory was discarded after
        an unknown outcome, it is first reloaded with the fence checked. Without
        a claim (read-only tools) it is one ``HGET``. With ``wait_replicas`` every
        receipt answered was confirmed by ``WAIT``: those loaded by the claim
        or reload (which writes the fence), and those this owner stored (a
        commit that too few replicas acknowledged discards the memory); an
        ``HGET`` is then replaced by a replicated read (see the code).

        Raises:
            FencedError: a script of this backend already found the fence above
                this token, or the reload finds it: a stale owner answers nothing.
            UnavailableError: Redis failed; or (``reason`` ``replication``)
                fewer replicas than ``wait_replicas`` acknowledged in time.
            CorruptData: the stored value is malformed.
        """
        r = self._runner
        field = receipt_field(tenant, client_id, request_id)
        fenced_by = r.receipts.fenced_by
        if fenced_by is not None:
            raise FencedError(
                f"get_receipt refused for {r.process_id}: token {r.token} is below the "
                f"fence {fenced_by}", token=r.token, fence=fenced_by,
                process_id=r.process_id)
        if self._claimed:
            if not r.receipts.loaded:
                self._claim_load(claim=False)
            held = r.receipts.get(field)
            if held is None:
                return None
            return decode_receipt(r.process_id, tenant, client_id, request_id, held)
        with redis_boundary("get_receipt", r.process_id):
            if r.config.wait_replicas:
                # A receipt on the master whose commit no replica has yet (the
                # commit answered "unavailable", reason "replication") must not
                # be replayed as an acknowledgement: read it with a replicated
                # no-op write and WAIT, so a replay is acknowledged only once
                # the commit that stored it is on the replicas too.
                reply = r.run("get_receipt", r.scripts.get_receipt_synced,
                              [r.keys.fence, r.keys.receipts], [field],
                              outcome="none")
                raw = reply[1]
            else:
                raw = r.client.hget(r.keys.receipts, field)
        if raw is None:
            return None
        return decode_receipt(r.process_id, tenant, client_id, request_id, raw)

    def put_receipt(self, receipt: Receipt, *, version: int) -> None:
        """Store a conflict or rejected receipt observed at ``version`` (fenced).

        Raises:
            FencedError: a newer owner holds the process; nothing stored.
            UnavailableError: Redis failed; the receipt may or may not be stored
                (storing it again is harmless).
        """
        r = self._runner
        r.check_guard()
        field = receipt_field(receipt.tenant, receipt.client_id, receipt.request_id)
        value = encode_receipt(receipt)
        try:
            with redis_boundary("put_receipt", r.process_id, outcome="unknown"):
                reply = r.run(
                    "put_receipt", r.scripts.put_receipt,
                    [r.keys.fence, r.keys.receipts, r.keys.receipts_order],
                    [r.token, field, value, r.config.max_receipts],
                )
        except UnavailableError:
            r.receipts.forget()
            raise
        r.verdict(reply, "put_receipt")
        r.receipts.remember(field, value)

    # -- commit (CommitBackend) -------------------------------------------------------

    def commit_args(
        self,
        transition: Transition,
        receipt: Receipt | None,
        intents: Sequence[dict[str, Any]],
        completion: Mapping[str, Any] | None,
    ) -> CommitArgs:
        """The commit script's arguments for ``transition`` under this owner's token
        (:meth:`CommitArgs.of` with this log's receipt bound and signal retention)."""
        r = self._runner
        return CommitArgs.of(transition, receipt, intents, completion, token=r.token,
                             max_receipts=r.config.max_receipts,
                             signal_retention=r.config.signal_retention)

    def commit(
        self,
        transition: Transition,
        receipt: Receipt | None = None,
        intents: Sequence[dict[str, Any]] = (),
        *,
        completion: Mapping[str, Any] | None = None,
    ) -> None:
        """Durably commit ``transition`` with its receipt and outbox intents, atomically.

        The same script appends the ``committed`` signal (the transition's
        :class:`~svit_cluster.process.Change`: version, sorted changed paths,
        content hashes; no values) to the process's signal stream, and then,
        if ``completion`` is given (an inbox acknowledge that ends a turn), the
        ``completion`` signal, so a completion exists if and only if its
        acknowledge committed.

        Host operations pass no receipt. After every ``snapshot_every`` commits
        (or ``snapshot_max_tail_bytes`` of records) a snapshot of the new state
        is stored and the stream trimmed; a failed snapshot is logged and
        retried after the next commit, never failing the commit.

        Raises:
            FencedError: a newer owner holds the process (fields ``token``,
                ``fence``); nothing stored.
            ConflictError: the durable head is not the transition's base
                (fields ``expected_version``, ``actual_version``); nothing stored.
            NotFound: the process was never created (see ``create``).
            CorruptData: the stream already holds an entry at the new version
                (or its key has the wrong type).
            UnavailableError: Redis failed; ``fields["outcome"]`` is
                ``"unknown"`` (retrying the *same request id* is safe: the
                receipt replays; re-sealing and committing anew is not), except
                when Redis refused the script's first write (``reason`` ``oom``,
                ``readonly``, ``misconf``... see ``store._redis.REFUSALS``):
                then ``"none"``, nothing was stored, and the same request can be
                retried once Redis recovers; likewise ``"none"`` with ``reason``
                ``eviction_policy`` (fields ``policy``, ``node``): the node's
                ``maxmemory-policy`` is not ``noeviction`` (read again at most
                ``eviction_check_s`` after its last verdict, see
                :func:`~svit_cluster.store.require_noeviction`) and nothing was
                sent. With ``wait_replicas`` set, a commit that fewer replicas
                acknowledged in time is *not* acknowledged: ``unavailable``,
                ``outcome`` ``unknown``, ``reason`` ``replication`` (a
                promoted replica may lack it).
        """
        r = self._runner
        r.check_guard()
        rec = transition.record
        args = self.commit_args(transition, receipt, intents, completion)
        try:
            with redis_boundary("commit", r.process_id, outcome="unknown"):
                reply = r.run("commit", r.scripts.commit, self.commit_keys, args.as_args())
        except UnavailableError:
            r.receipts.forget()  # the receipt may or may not be stored
            raise
        status, rest = r.verdict(reply, "commit")
        if status == "ok":
            if args.receipt_field:
                r.receipts.remember(args.receipt_field, args.receipt_value)
            self._after_commit(transition, len(args.record))
            return
        if status == "conflict":
            # The head moved without this owner knowing (its own write whose
            # reply was lost): its receipt may be stored too, so reload them.
            r.receipts.forget()
            raise ConflictError(
                f"commit refused for {r.process_id}: head is at version {int(rest[0])}, "
                f"not {rec.process_version_before}",
                expected_version=rec.process_version_before,
                actual_version=int(rest[0]),
                process_id=r.process_id,
            )
        if status == "missing":
            raise NotFound(f"process {r.process_id} was never created in the store",
                           process_id=r.process_id)
        detail = rest[0].decode(errors="replace") if rest else status
        reason = refusal_reason(detail)
        if reason is not None:
            # The XADD is the script's first write and it was refused (OOM,
            # READONLY, MISCONF...): the script returned before writing anything.
            raise UnavailableError(
                f"commit of version {rec.process_version_after} of {r.process_id} "
                f"refused by redis: {detail[:300]}",
                op="commit", process_id=r.process_id, outcome="none", reason=reason,
            )
        raise corrupt(r.process_id, f"stream refused version {rec.process_version_after}: "
                      f"{detail}", version=rec.process_version_after)

    # -- snapshots ---------------------------------------------------------------------

    def snapshot(self, process: Process) -> bool:
        """Store a snapshot of ``process`` (which must be at the durable head), fenced.

        Trims the stream below ``process.version - trim_margin + 1``, or below
        a tail reader's hold + 1 if that is lower (but never below
        ``process.version - hold_max_entries + 1``).

        Returns:
            True if stored; False if a snapshot at least as new already exists.

        Raises:
            FencedError: a newer owner holds the process; nothing stored.
            ConflictError: ``process`` is not at the durable head.
            NotFound: the process was never created.
            UnavailableError: Redis failed.
        """
        r = self._runner
        r.check_guard()
        minid = process.version - r.config.trim_margin + 1
        floor = process.version - r.config.hold_max_entries + 1
        keys = r.keys
        with redis_boundary("snapshot", r.process_id, outcome="unknown"):
            reply = r.run(
                "snapshot", r.scripts.snapshot,
                [keys.fence, keys.snapshot, keys.head, keys.stream, keys.hold],
                [r.token, process.version, process.position, process.chain_head,
                 process.root_hash, process.snapshot(),
                 str(minid) if minid > 1 else "", str(max(floor, 1))],
            )
        status, rest = r.verdict(reply, "snapshot")
        if status == "missing":
            raise NotFound(f"process {r.process_id} was never created in the store",
                           process_id=r.process_id)
        if status == "not_head":
            raise ConflictError(
                f"snapshot of version {process.version} refused: head is at {int(rest[0])}",
                expected_version=process.version, actual_version=int(rest[0]),
                process_id=r.process_id,
            )
        self._cadence.reset()
        return status == "ok"

    def _after_commit(self, transition: Transition, record_bytes: int) -> None:
        process_id = self._runner.process_id
        limits = self._cadence.committed(record_bytes,
                                         lambda: limits_of(process_id, transition))
        if limits is None:
            return
        try:
            self.snapshot(process_after(process_id, transition, limits))
        except SvitError as exc:
            log.warning("snapshot after version %d of %s failed: %s",
                        transition.record.process_version_after, process_id, exc)
