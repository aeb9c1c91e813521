"""Snapshots of committed state, and restore = snapshot + verified tail replay.

Pure functions, no I/O: :mod:`svit_cluster.store._log_reader` reads the stored
snapshot, tail, head and fence in one consistent view and hands them here.

A restore never repairs anything. It fails loudly with
:class:`~svit_cluster.errors.CorruptData` (``corrupt_log``), naming the process
and the version or position, when:

* the snapshot does not decode or verify (format, root hash, id, version);
* a tail entry is missing (versions must be snapshot+1 .. head, no gap);
* an entry carries a token below an earlier entry's or the snapshot's token
  (a stale owner wrote after a newer one), or above the stored fence;
* a record does not decode, does not continue the hash chain, does not step
  the version by exactly +1, or does not reproduce its root hash (replay runs
  no guest code);
* the result is not exactly the stored head (version, chain head, root hash,
  position).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from svit_cluster.errors import CorruptData, InvalidInput
from svit_cluster.process import Limits, Process, Transaction, Transition
from svit_cluster.store._records import Head, LogEntry, StoredSnapshot, corrupt

__all__ = ["RestoreStats", "limits_of", "process_after", "verify_and_restore"]


@dataclass(frozen=True, slots=True)
class RestoreStats:
    """What one restore read.

    Attributes:
        snapshot_version: version of the snapshot it started from.
        snapshot_bytes: size of the snapshot document.
        tail_entries: stream entries replayed after the snapshot.
        duration_s: wall time of the whole restore (read + verify + replay).
    """

    snapshot_version: int
    snapshot_bytes: int
    tail_entries: int
    duration_s: float


def limits_of(process_id: str, transition: Transition) -> Limits:
    """The limits recorded in ``/system/limits`` of a transition's new root."""
    probe = Process(process_id, cast(Any, transition.root))
    return Limits.from_dict(probe.read("/system/limits"))


def process_after(process_id: str, transition: Transition, limits: Limits) -> Process:
    """The process as it is after ``transition`` (to snapshot it right after commit)."""
    rec = transition.record
    return Process(
        process_id,
        cast(Any, transition.root),
        version=rec.process_version_after,
        limits=limits,
        position=rec.position,
        chain_head=rec.event_hash,
    )


def _tail_records(
    process_id: str, snap: StoredSnapshot, entries: Sequence[LogEntry], head: Head, fence: int
) -> list[Transaction]:
    expected = snap.version + 1
    last_token = snap.token
    records: list[Transaction] = []
    for entry in entries:
        if entry.version <= snap.version:
            continue  # kept below the snapshot as a margin; not needed
        if entry.version != expected:
            raise corrupt(process_id, f"missing stream entry at version {expected}",
                          version=expected, position=snap.position + expected - snap.version)
        if entry.token < last_token:
            raise corrupt(process_id, f"stale token {entry.token} after token {last_token} "
                          f"at version {entry.version}", version=entry.version)
        if entry.token > fence:
            raise corrupt(process_id, f"token {entry.token} above the fence {fence} "
                          f"at version {entry.version}", version=entry.version)
        try:
            record = Transaction.decode(entry.record)
        except InvalidInput as exc:
            raise corrupt(process_id, f"undecodable record at version {entry.version}: "
                          f"{exc.message}", version=entry.version) from exc
        if record.process_version_after != entry.version:
            raise corrupt(process_id, f"entry {entry.version} holds the record of version "
                          f"{record.process_version_after}", version=entry.version,
                          position=record.position)
        records.append(record)
        last_token = entry.token
        expected += 1
    if expected - 1 < head.version:
        raise corrupt(process_id, f"missing stream entry at version {expected}",
                      version=expected)
    if expected - 1 > head.version:
        raise corrupt(process_id, f"stream holds version {expected - 1} beyond the head "
                      f"{head.version}", version=expected - 1)
    if records and head.token != last_token:
        raise corrupt(process_id, f"head token {head.token} differs from the last entry's "
                      f"{last_token}", version=head.version)
    return records


def verify_and_restore(
    process_id: str,
    snap: StoredSnapshot,
    entries: Sequence[LogEntry],
    head: Head,
    fence: int,
) -> Process:
    """Rebuild the process from its snapshot and tail, verifying everything.

    Args:
        process_id: the process the keys belong to.
        snap: the stored snapshot.
        entries: stream entries in id order (entries at or below the snapshot
            version are skipped).
        head: the stored head; the result must equal it.
        fence: the stored fence; no entry may carry a larger token.

    Returns:
        The process at ``head.version``, with no committer installed.

    Raises:
        CorruptData: (``corrupt_log``) see the module docstring.
    """
    if head.version < snap.version:
        raise corrupt(process_id, f"head {head.version} is behind the snapshot {snap.version}",
                      version=snap.version)
    records = _tail_records(process_id, snap, entries, head, fence)
    try:
        proc = Process.restore(snap.data, position=snap.position, chain_head=snap.chain_head)
    except InvalidInput as exc:
        raise corrupt(process_id, f"snapshot at version {snap.version} does not verify: "
                      f"{exc.message}", version=snap.version, position=snap.position) from exc
    if proc.id != process_id or proc.version != snap.version or proc.root_hash != snap.root_hash:
        raise corrupt(process_id, f"snapshot at version {snap.version} does not match its "
                      "stored id, version or root hash", version=snap.version,
                      position=snap.position)
    try:
        proc.replay(records)
    except CorruptData as exc:
        raise corrupt(process_id, f"replay failed after version {proc.version}: {exc.message}",
                      version=proc.version + 1, position=proc.position + 1) from exc
    if (
        proc.version != head.version
        or proc.chain_head != head.chain_head
        or proc.root_hash != head.root_hash
        or proc.position != head.position
    ):
        raise corrupt(process_id, f"replayed state at version {proc.version} does not match "
                      "the stored head", version=proc.version, position=proc.position)
    return proc
