"""What every invariant of the checker reads: the run folded into one :class:`Context`.

:func:`build_context` folds the history's events into operations (:class:`Op`)
and merges each process's stored and observed entries into one chain
(:class:`ChainEntry`); an invariant is a function ``Context -> Iterable[Anomaly]``
that may also record what it could not verify (:class:`Unverified`). Pure
functions, no I/O.

The invariants in :mod:`svit_chaos.checker` and those in their own modules
(:mod:`svit_chaos.ports`, :mod:`svit_chaos.timers`, :mod:`svit_chaos.leases`) all
import these types from here, and the checker imports those modules: the types
sit below every invariant, so no invariant module imports the checker.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from svit_cluster.dispatch import DestinationRecord
from svit_cluster.errors import SvitError
from svit_cluster.process import Process, Transaction

from .history import Event
from .logs import ProcessLog, SnapshotRecord, StoredEntry, StoredLogs

__all__ = [
    "COUNT_PATH",
    "RID_PATH",
    "SENT_PATH",
    "Anomaly",
    "ChainEntry",
    "Context",
    "Invariant",
    "Op",
    "Unverified",
    "base_version",
    "build_context",
    "destination_record",
    "replay",
    "restore_snapshot",
    "rid_of",
]

#: Where the workload script writes the request id of each activation.
RID_PATH = "/memory/last"
#: Where it keeps the number of activations.
COUNT_PATH = "/memory/count"
#: Where it writes the id of the intent an activation staged (``send!``'s result).
SENT_PATH = "/memory/sent"


@dataclass(frozen=True, slots=True)
class Anomaly:
    """One violated guarantee, with everything needed to find it.

    Attributes:
        invariant: the invariant's registered name (``chain``, ``tokens``, ...).
        process: the process, or None for run-wide anomalies.
        message: what is wrong, in one sentence.
        versions, tokens: the versions and fencing tokens involved.
        lines: history line numbers involved (invoke/ok/fence events).
    """

    invariant: str
    process: str | None
    message: str
    versions: tuple[int, ...] = ()
    tokens: tuple[int, ...] = ()
    lines: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"invariant": self.invariant, "process": self.process, "message": self.message,
                "versions": list(self.versions), "tokens": list(self.tokens),
                "lines": list(self.lines)}


@dataclass(frozen=True, slots=True)
class Unverified:
    """Something the checker could not prove either way (makes a run inconclusive)."""

    invariant: str
    process: str | None
    message: str
    lines: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"invariant": self.invariant, "process": self.process, "message": self.message,
                "lines": list(self.lines)}


@dataclass
class Op:
    """One operation folded from its ``invoke`` and completion events.

    ``outcome`` is ``ok``, ``fail``, ``info`` (unknown) or ``pending`` (invoked,
    never completed: the harness stopped first; counted as unknown).
    """

    rid: str
    process: str
    client: str
    invoke_line: int
    t_invoke: float
    expected: int | None = None
    outcome: str = "pending"
    end_line: int | None = None
    t_end: float | None = None
    version: int | None = None
    token: int | None = None
    code: str | None = None

    @property
    def lines(self) -> tuple[int, ...]:
        return (self.invoke_line,) if self.end_line is None else (self.invoke_line, self.end_line)


@dataclass(frozen=True, slots=True)
class ChainEntry:
    """One version of the merged chain of a process."""

    version: int
    token: int
    raw: bytes
    record: Transaction | None
    rid: str | None
    sources: frozenset[str]


@dataclass
class Context:
    """What every invariant reads: history, logs, folded operations, merged chains.

    Invariants may also append to :attr:`unverified`.
    """

    history: Sequence[Event]
    logs: StoredLogs
    ops: dict[str, Op] = field(default_factory=dict)
    ops_by_process: dict[str, list[Op]] = field(default_factory=lambda: defaultdict(list))
    chains: dict[str, dict[int, ChainEntry]] = field(default_factory=dict)
    fences: list[Event] = field(default_factory=list)
    finals: dict[str, Event] = field(default_factory=dict)
    unverified: list[Unverified] = field(default_factory=list)
    history_problems: list[Anomaly] = field(default_factory=list)
    merge_problems: list[Anomaly] = field(default_factory=list)
    _restored: dict[str, Process | None] = field(default_factory=dict)
    _by_rid: dict[str, dict[str, list[ChainEntry]]] = field(default_factory=dict)

    @property
    def processes(self) -> list[str]:
        """Every process named by the history or the logs, sorted."""
        return sorted(set(self.ops_by_process) | set(self.logs.processes))

    def log(self, process: str) -> ProcessLog:
        return self.logs.processes.get(process) or ProcessLog(process)

    def chain(self, process: str) -> dict[int, ChainEntry]:
        return self.chains.get(process, {})

    def where(self, process: str, rid: str) -> list[ChainEntry]:
        """The entries of ``process`` whose request id is ``rid``, in version order."""
        index = self._by_rid.get(process)
        if index is None:  # built once per process: lookups stay O(1) on long runs
            index = {}
            for _, entry in sorted(self.chain(process).items()):
                if entry.rid is not None:
                    index.setdefault(entry.rid, []).append(entry)
            self._by_rid[process] = index
        return list(index.get(rid, ()))

    def restored(self, process: str) -> Process | None:
        """The process rebuilt from its newest replayable snapshot up to the stored head."""
        if process not in self._restored:
            log = self.log(process)
            found: Process | None = None
            if log.head is not None:
                for snap in sorted(log.snapshots, key=lambda s: -s.version):
                    if snap.version > log.head.version:
                        continue
                    result = replay(process, snap, self.chain(process), log.head.version,
                                    base_version(log))
                    if isinstance(result, Process):
                        found = result
                        break
            self._restored[process] = found
        return self._restored[process]

    def acked_at(self, process: str, version: int) -> list[Op]:
        return [op for op in self.ops_by_process.get(process, ())
                if op.outcome == "ok" and op.version == version]


Invariant = Callable[[Context], Iterable[Anomaly]]


# -- building the context ------------------------------------------------------------------


def rid_of(record: Transaction, path: str = RID_PATH) -> str | None:
    """The request id the workload wrote at ``path`` in this record, if any."""
    for m in record.mutations:
        if m.op == "set" and m.path == path and isinstance(m.value, str):
            return m.value
    return None


def _fold_ops(ctx: Context) -> None:
    for ev in ctx.history:
        kind = ev.get("kind")
        line = int(ev.get("line", 0))
        if kind == "fence":
            ctx.fences.append(ev)
            continue
        if kind == "final" and isinstance(ev.get("process"), str):
            ctx.finals[ev["process"]] = ev
            continue
        if kind not in ("invoke", "ok", "fail", "info"):
            continue
        rid = ev.get("rid")
        if not isinstance(rid, str):
            ctx.history_problems.append(Anomaly("history", ev.get("process"),
                                                f"{kind} event without a request id",
                                                lines=(line,)))
            continue
        if kind == "invoke":
            if rid in ctx.ops:
                ctx.history_problems.append(Anomaly(
                    "history", ev.get("process"), f"request id {rid} invoked twice",
                    lines=(ctx.ops[rid].invoke_line, line)))
                continue
            op = Op(rid=rid, process=str(ev.get("process")), client=str(ev.get("client")),
                    invoke_line=line, t_invoke=float(ev["t"]),
                    expected=ev.get("expected"))
            ctx.ops[rid] = op
            ctx.ops_by_process[op.process].append(op)
            continue
        op2 = ctx.ops.get(rid)
        if op2 is None or op2.outcome != "pending":
            ctx.history_problems.append(Anomaly(
                "history", ev.get("process"),
                f"{kind} for request id {rid} without a pending invoke", lines=(line,)))
            continue
        op2.outcome = kind
        op2.end_line = line
        op2.t_end = float(ev["t"])
        version = ev.get("version")
        op2.version = version if isinstance(version, int) else None
        token = ev.get("token")
        op2.token = token if isinstance(token, int) else None
        op2.code = ev.get("outcome") or ev.get("code") or ev.get("error")


def _decode(raw: bytes) -> Transaction | None:
    try:
        return Transaction.decode(raw)
    except SvitError:
        return None


def _merge(ctx: Context, rid_path: str) -> None:
    for process, log in ctx.logs.processes.items():
        chain: dict[int, ChainEntry] = {}
        snap = log.final_snapshot
        snap_version = snap.version if snap is not None else 0
        for version in sorted(set(log.entries) | set(log.collected)):
            final = log.entries.get(version)
            seen = log.collected.get(version)
            if final is not None and seen is not None and (
                final.record != seen.record or final.token != seen.token
            ):
                ctx.merge_problems.append(Anomaly(
                    "chain", process,
                    f"version {version} changed after it was committed: the observer copied "
                    f"an entry with token {seen.token}, the store now holds one with token "
                    f"{final.token} (a lost or overwritten commit)",
                    versions=(version,), tokens=(seen.token, final.token),
                    lines=tuple(op.end_line or op.invoke_line
                                for op in ctx.acked_at(process, version))))
            if final is None and seen is not None and version > snap_version:
                ctx.merge_problems.append(Anomaly(
                    "chain", process,
                    f"entry at version {version} (token {seen.token}) was committed and later "
                    f"disappeared from the stream above the snapshot at {snap_version}",
                    versions=(version,), tokens=(seen.token,),
                    lines=tuple(op.end_line or op.invoke_line
                                for op in ctx.acked_at(process, version))))
            entry: StoredEntry = final if final is not None else seen  # type: ignore[assignment]
            record = _decode(entry.record)
            sources = frozenset(s for s, e in (("final", final), ("collected", seen))
                                if e is not None)
            chain[version] = ChainEntry(version, entry.token, entry.record, record,
                                        rid_of(record, rid_path) if record else None, sources)
        ctx.chains[process] = chain


def build_context(history: Sequence[Event], logs: StoredLogs, *,
                  rid_path: str = RID_PATH) -> Context:
    """Fold the history into operations and merge each process's entries."""
    ctx = Context(history=history, logs=logs)
    _fold_ops(ctx)
    _merge(ctx, rid_path)
    return ctx


def restore_snapshot(process: str, snap: SnapshotRecord) -> Process | str:
    """Restore ``snap`` alone, or say why it does not restore or does not match its
    stored id, version and root hash."""
    try:
        proc = Process.restore(snap.data, position=snap.position, chain_head=snap.chain_head)
    except SvitError as exc:
        return f"the snapshot at version {snap.version} does not restore: {exc.message}"
    if proc.id != process or proc.version != snap.version or proc.root_hash != snap.root_hash:
        return (f"the snapshot at version {snap.version} does not match its stored id, "
                "version or root hash")
    return proc


def replay(process: str, snap: SnapshotRecord, chain: dict[int, ChainEntry],
            upto: int, base: int) -> Process | str:
    """Restore ``snap`` and replay up to ``upto``; entries above ``base`` (the final
    snapshot's version) must still be in the stream, not only in the observer's copy.

    Returns:
        The restored process, or why it could not be restored (``missing:<version>``
        when the tail lacks that version).
    """
    proc = restore_snapshot(process, snap)
    if isinstance(proc, str):
        return proc
    records: list[Transaction] = []
    for version in range(snap.version + 1, upto + 1):
        entry = chain.get(version)
        if entry is None or entry.record is None or (
            version > base and "final" not in entry.sources
        ):
            return f"missing:{version}"
        records.append(entry.record)
    try:
        proc.replay(records)
    except SvitError as exc:
        return f"replay from the snapshot at version {snap.version} fails: {exc.message}"
    return proc


def base_version(log: ProcessLog) -> int:
    """The version of the final snapshot of ``log`` (0 without one)."""
    snap = log.final_snapshot
    return snap.version if snap is not None else 0


def destination_record(doc: Any) -> DestinationRecord | None:
    """The ``destination`` of an ``outbox`` history event as a :class:`DestinationRecord`
    (None when the event has none)."""
    if not isinstance(doc, dict):
        return None
    version = doc.get("version")
    return DestinationRecord(
        process_id=str(doc.get("process_id")),
        version=version if isinstance(version, int) else None,
        appends={str(k): int(v) for k, v in (doc.get("appends") or {}).items()},
        log_complete=bool(doc.get("log_complete")),
        inbox_copies={str(k): int(v) for k, v in (doc.get("inbox_copies") or {}).items()},
        delivered_slots=frozenset(str(x) for x in doc.get("delivered_slots") or ()),
    )
