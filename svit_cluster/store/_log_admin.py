"""The owner's fenced writes around the commit path: create, residency settings, delete.

:class:`LogAdmin` starts a process's log, keeps its residency settings and
deletes it. Every write runs through the owner's
:class:`~svit_cluster.store._fenced_runner.FencedRunner` with the guard checked
first, so only the current owner may; none moves the version. A delete leaves
the fence key, raised to the deleter's token, as the tombstone that keeps
refusing an older owner's writes.
"""

from __future__ import annotations

from typing import Any

from svit_cluster.errors import ConflictError, InvalidInput, NotFound
from svit_cluster.process import Process
from svit_cluster.store._cadence import SnapshotCadence
from svit_cluster.store._fenced_runner import FencedRunner
from svit_cluster.store._redis import redis_boundary

__all__ = ["LogAdmin"]


class LogAdmin:
    """Create, residency settings and delete of one process, for one owner.

    Args:
        runner: the owner's identity and script runner (shared with the writer).
        cadence: the snapshot cadence (a create resets it).
    """

    def __init__(self, runner: FencedRunner, cadence: SnapshotCadence) -> None:
        self._runner = runner
        self._cadence = cadence

    def create(self, process: Process) -> None:
        """Store ``process`` as the start of a new log (head + snapshot), fenced.

        Events a history fork copied for this id beforehand (the session
        pointer and that session's events, which expire while no create
        follows) are kept for good by the same script.

        Raises:
            ConflictError: the process already exists in the store.
            FencedError: a newer owner holds the process.
            UnavailableError: Redis failed (the create may or may not be stored).
            InvalidInput: ``process`` has another id.
        """
        r = self._runner
        if process.id != r.process_id:
            raise InvalidInput("process id does not match the store's process id")
        r.check_guard()
        keys = r.keys
        with redis_boundary("create", r.process_id, outcome="unknown"):
            session = r.client.get(keys.session)
            history = [keys.session, keys.events(
                session.decode() if isinstance(session, bytes) else str(session))
            ] if session else []
            reply = r.run(
                "create", r.scripts.create,
                [keys.fence, keys.head, keys.snapshot, keys.queued, *history],
                [r.token, process.version, process.position, process.chain_head,
                 process.root_hash, process.snapshot(),
                 b"1" if process.inbox_head_hash() is not None else b"0"],
            )
        status, _ = r.verdict(reply, "create")
        if status == "exists":
            raise ConflictError(f"process {r.process_id} already exists in the store",
                                process_id=r.process_id)
        self._cadence.reset(process.limits)

    def residency(self) -> dict[str, float]:
        """The process's residency settings (``{"passivate_after_s": s}`` when
        set; ``{}`` when none). A malformed stored value is left out.

        Raises:
            UnavailableError: Redis failed.
        """
        r = self._runner
        with redis_boundary("residency", r.process_id, outcome="none"):
            raw = r.client.hgetall(r.keys.residency)
        out: dict[str, float] = {}
        for key, value in (raw or {}).items():
            name = key.decode() if isinstance(key, bytes) else str(key)
            try:
                out[name] = float(value)
            except (TypeError, ValueError):
                continue
        return out

    def set_residency(self, name: str, value: float | None) -> None:
        """Set (or with None remove) residency setting ``name``, fenced like a
        commit: only the current owner may. Not a transition: the version does
        not move. Safe to retry.

        Raises:
            FencedError: a newer owner holds the process.
            NotFound: the process is not in the store.
            UnavailableError: Redis failed (retry).
        """
        r = self._runner
        r.check_guard()
        keys = r.keys
        with redis_boundary("set_residency", r.process_id, outcome="unknown"):
            reply = r.run("set_residency", r.scripts.set_residency,
                          [keys.fence, keys.head, keys.residency],
                          [r.token, name, "" if value is None else repr(float(value))])
        status, _ = r.verdict(reply, "set_residency")
        if status == "missing":
            raise NotFound(f"unknown process {r.process_id}", process_id=r.process_id)

    def delete(self) -> dict[str, Any]:
        """Delete the process from the store, fenced like a commit.

        Removes the stream, head, snapshot, receipts, outbox (intents not yet
        delivered are dropped), signals, the session pointer, the residency
        settings, the ``queued`` mark, the dispatcher's timer keys (pending and firing timers, their
        outcomes and log: a deleted process's timers never fire) and the
        current session's events stream, in one script. The
        fence key stays, raised to this token: it is the tombstone that keeps
        refusing every write of an older owner, so a stale owner cannot
        resurrect the process (see
        ``DELETE`` in ``_scripts``). Not removed: the fence key itself, the
        events streams of earlier reasoning sessions (each expires
        ``OLD_SESSION_TTL_S`` after its session ended), and the dispatcher's
        per-stream bookkeeping: ``<outbox>:lease-token``, a fencing counter
        kept like the fence, and ``:dead-settled``, whose fields leave with
        their dead letters (``svit_cluster.dispatch``).

        Returns:
            ``{"version": int | None, "removed_keys": int}``: the head version
            that was deleted and how many Redis keys were removed.

        Raises:
            FencedError: a newer owner holds the process; nothing deleted.
            NotFound: the process is not in the store (never created, or
                already deleted).
            UnavailableError: Redis failed (the delete may or may not be
                applied; retrying answers ``NotFound`` if it was).
        """
        r = self._runner
        r.check_guard()
        keys = r.keys
        with redis_boundary("delete", r.process_id, outcome="unknown"):
            session = r.client.get(keys.session)
            extra = [keys.events(session.decode() if isinstance(session, bytes) else session)
                     ] if session else []
            reply = r.run(
                "delete", r.scripts.delete,
                [keys.fence, keys.head, keys.snapshot, keys.stream, keys.receipts,
                 keys.receipts_order, keys.outbox, keys.signals, keys.session, keys.hold,
                 keys.residency, keys.queued, keys.timers, keys.timer_intents,
                 keys.timer_firing, keys.timer_done, keys.timer_log, *extra],
                [r.token],
            )
        status, rest = r.verdict(reply, "delete")
        if status == "missing":
            raise NotFound(f"unknown process {r.process_id}", process_id=r.process_id)
        version = rest[0].decode() if isinstance(rest[0], bytes) else str(rest[0])
        return {"version": int(version) if version else None, "removed_keys": int(rest[1])}
