"""The checker: proves the run's guarantees from the history and the stored logs.

Pure functions, no I/O. :func:`check` builds a :class:`Context` (operations
folded from the history, one merged chain of entries per process) and runs a
list of **pluggable invariants**; each is a function ``Context -> Iterable[Anomaly]``
registered under a name. The defaults (the guarantees in ``docs/architecture.md``,
"What is guaranteed, under which faults"):

1. ``chain`` -- one chain per process: versions 1..N, no gap, no fork, every
   record decodes, continues the hash chain and matches the stored head.
2. ``acked`` -- every acknowledged commit is stored at the version it was
   acknowledged with (the request id in that entry's ``/memory/last`` write).
3. ``unique`` -- no request key commits twice.
4. ``tokens`` -- no entry carries a token below a token that had already
   claimed the process: tokens never decrease in version order (snapshots
   included), none exceeds the final fence, and none is below a fence the
   observer saw while the head was below that entry.
5. ``restore`` -- every snapshot plus its tail replays (no guest code) to the
   stored head's version, chain head and root hash, and the state read through
   the gateway after healing agrees.
6. ``memory`` -- per process, ``acked <= final /memory/count <= acked + unknown``.

7. ``outbox`` -- every committed intent is dispatched at least once and
   recorded once at its Svit destination. The committed intents come from the
   stored logs (the workload script writes the id ``send!`` returned to
   ``/memory/sent``); their delivery state and the destination's record come
   from the ``outbox`` history event the harness writes after the dispatcher
   drained (:func:`outbox_event`, built with ``svit_cluster.dispatch``'s
   ``delivery_status`` and ``destination_records``). Pending or dead-lettered
   intents, intents missing from the outbox, and intents not recorded exactly
   once (``DestinationRecord.recorded_once``) are anomalies. A history without
   an ``outbox`` event and without a ``sink`` in its ``meta`` event is skipped.
8. ``ports`` -- in a port-calling run, every committed port result equals the
   test server's first answer for the key of the committed call (found by the
   ``Svit-Process`` / ``Svit-Version`` / ``Svit-Call-Index`` headers and the
   request id), that answer was made for the committing request itself, and no
   key applied its effect twice (:mod:`svit_chaos.ports`).
9. ``leases`` -- no host loses its etcd lease during a ``load-host`` window
   (up to lease TTL + 2 s after its heal) unless a deliberate fault on that
   host's lease keeping explains it; losses outside load windows are only
   flagged in the report (:mod:`svit_chaos.leases`, from the observer's
   ``host_lease`` events).
10. ``timers`` -- every acknowledged timer arm is delivered at the sink under
   its own id, not before its due time, unless a cancel's outcome was
   ``cancelled`` (then never delivered); every acknowledged cancel is applied;
   nothing fires under a key no commit armed (:mod:`svit_chaos.timers`, from
   the ``ok`` events and the ``timers`` event). Timers and cancel entries are
   judged there, not by ``outbox``.

Two more default checks close the loop: ``refused`` (an operation reported as
definitely failed never commits) and ``phantom`` (no committed request id was
never invoked). Add more with ``invariants=DEFAULT_INVARIANTS + (("name", fn),)``.

Verdict: ``fail`` on any anomaly; otherwise ``inconclusive`` if the harness
reported an error or something could not be verified (for example an
acknowledged version trimmed before the observer copied it); else ``pass``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from svit_cluster.dispatch import DestinationRecord, IntentStatus, OutboxSummary
from svit_cluster.process import DEDUP_WINDOW, GENESIS_HASH, Process

from .context import (
    COUNT_PATH,
    RID_PATH,
    SENT_PATH,
    Anomaly,
    ChainEntry,
    Context,
    Invariant,
    Op,
    Unverified,
    base_version,
    build_context,
    destination_record,
    replay,
    restore_snapshot,
)
from .history import Event
from .leases import check_leases as _check_leases
from .logs import SnapshotRecord, StoredLogs
from .ports import check_ports as _check_ports
from .timers import check_timers as _check_timers

__all__ = [
    "DEFAULT_INVARIANTS",
    "RID_PATH",
    "SENT_PATH",
    "Anomaly",
    "ChainEntry",
    "CheckResult",
    "Context",
    "Invariant",
    "Op",
    "Unverified",
    "build_context",
    "check",
    "check_acked",
    "check_chain",
    "check_leases",
    "check_memory",
    "check_outbox",
    "check_phantom",
    "check_ports",
    "check_refused",
    "check_restore",
    "check_timers",
    "check_tokens",
    "check_unique",
    "outbox_event",
]


@dataclass
class CheckResult:
    """The checker's answer: verdict, anomalies, what it could not verify, statistics."""

    verdict: str
    anomalies: list[Anomaly]
    unverified: list[Unverified]
    stats: dict[str, Any]
    harness_errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.verdict == "pass"

    def by_invariant(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for a in self.anomalies:
            counts[a.invariant] += 1
        return dict(counts)

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "anomalies": [a.to_json() for a in self.anomalies],
            "anomalies_by_invariant": self.by_invariant(),
            "unverified": [u.to_json() for u in self.unverified],
            "stats": self.stats,
            "harness_errors": list(self.harness_errors),
        }


# -- invariants ---------------------------------------------------------------------------


def _op_lines(ops: Iterable[Op]) -> tuple[int, ...]:
    return tuple(sorted({line for op in ops for line in op.lines}))


def check_chain(ctx: Context) -> Iterator[Anomaly]:
    """(1) One chain of versions 1..N per process: no gap, no fork; hashes link."""
    yield from ctx.history_problems
    yield from ctx.merge_problems
    for process in ctx.processes:
        log = ctx.log(process)
        chain = ctx.chain(process)
        for message in log.problems:
            yield Anomaly("chain", process, f"malformed stored data: {message}")
        acked: dict[int, list[Op]] = defaultdict(list)
        for op in ctx.ops_by_process.get(process, ()):
            if op.outcome == "ok" and op.version is not None:
                acked[op.version].append(op)
        for version, ops in sorted(acked.items()):
            rids = sorted({op.rid for op in ops})
            if len(rids) > 1:
                yield Anomaly("chain", process,
                              f"fork: {len(rids)} different requests acknowledged at version "
                              f"{version}: {', '.join(rids)}",
                              versions=(version,), lines=_op_lines(ops))
        head = log.head
        if head is None:
            if chain:
                yield Anomaly("chain", process, "stream entries exist but the head does not",
                              versions=tuple(sorted(chain))[:5])
            continue
        snap = log.final_snapshot
        base = snap.version if snap is not None else 0
        missing = [v for v in range(base + 1, head.version + 1) if v not in log.entries]
        if missing:
            yield Anomaly("chain", process,
                          f"gap: the stream lacks version(s) {_ranges(missing)} between the "
                          f"snapshot at {base} and the head at {head.version}",
                          versions=tuple(missing[:20]),
                          lines=_op_lines(op for v in missing for op in acked.get(v, ())))
        beyond = [v for v in chain if v > head.version]
        if beyond:
            yield Anomaly("chain", process,
                          f"version(s) {_ranges(sorted(beyond))} stored beyond the head "
                          f"{head.version}", versions=tuple(sorted(beyond)[:20]))
        unknown = [v for v in range(1, min(base, head.version) + 1) if v not in chain]
        if unknown:
            ctx.unverified.append(Unverified(
                "chain", process,
                f"versions {_ranges(unknown)} were trimmed before the observer copied them"))
        snaps = {s.version: s for s in log.snapshots}
        for version in sorted(chain):
            entry = chain[version]
            rec = entry.record
            if rec is None:
                yield Anomaly("chain", process, f"the record at version {version} does not "
                              "decode or its event hash does not verify",
                              versions=(version,), tokens=(entry.token,))
                continue
            if rec.address != process or rec.process_version_after != version:
                yield Anomaly("chain", process,
                              f"entry {version} holds the record of {rec.address} version "
                              f"{rec.process_version_after}",
                              versions=(version,), tokens=(entry.token,))
                continue
            prev = chain.get(version - 1)
            if version == 1:
                expected_prev: str | None = GENESIS_HASH
            elif prev is not None and prev.record is not None:
                expected_prev = prev.record.event_hash
            elif version - 1 in snaps:
                expected_prev = snaps[version - 1].chain_head
            else:
                expected_prev = None
            if expected_prev is not None and rec.previous_hash != expected_prev:
                yield Anomaly("chain", process,
                              f"hash chain breaks between versions {version - 1} and {version}",
                              versions=(version - 1, version),
                              tokens=(prev.token, entry.token) if prev else (entry.token,))
        last = chain.get(head.version)
        if last is not None and last.record is not None and head.version > 0 and (
            last.record.event_hash != head.chain_head
            or last.record.resulting_root_hash != head.root_hash
            or last.token != head.token
        ):
            yield Anomaly("chain", process,
                          f"the head at version {head.version} does not match the entry "
                          f"stored there (hash or token)",
                          versions=(head.version,), tokens=(head.token, last.token))


def check_acked(ctx: Context) -> Iterator[Anomaly]:
    """(2) Every acknowledged commit is stored at the version it was acknowledged with."""
    for process in ctx.processes:
        log = ctx.log(process)
        chain = ctx.chain(process)
        snap = log.final_snapshot
        base = snap.version if snap is not None else 0
        for op in ctx.ops_by_process.get(process, ()):
            if op.outcome != "ok":
                continue
            if op.version is None:
                yield Anomaly("acked", process, f"request {op.rid} acknowledged without a "
                              "version", lines=op.lines)
                continue
            entry = chain.get(op.version)
            if entry is not None and op.version > base and "final" not in entry.sources:
                yield Anomaly(
                    "acked", process,
                    f"acknowledged commit {op.rid} at version {op.version} is lost: the "
                    "observer saw it stored, the stream no longer holds it",
                    versions=(op.version,), tokens=(entry.token,), lines=op.lines)
                continue
            if entry is not None:
                if entry.rid == op.rid and op.token is not None and op.token != entry.token:
                    yield Anomaly(
                        "acked", process,
                        f"request {op.rid} was acknowledged under token {op.token} but is "
                        f"stored at version {op.version} with token {entry.token}",
                        versions=(op.version,), tokens=(op.token, entry.token), lines=op.lines)
                if entry.rid != op.rid:
                    found = ctx.where(process, op.rid)
                    elsewhere = (f"; it is stored at version(s) "
                                 f"{', '.join(str(e.version) for e in found)}" if found
                                 else "; it is stored nowhere")
                    yield Anomaly(
                        "acked", process,
                        f"acknowledged commit {op.rid} at version {op.version} is lost: that "
                        f"version holds {entry.rid or 'another change'} (token "
                        f"{entry.token}){elsewhere}",
                        versions=(op.version,), tokens=(entry.token,), lines=op.lines)
                continue
            head = log.head
            if head is None or op.version > head.version:
                yield Anomaly(
                    "acked", process,
                    f"acknowledged commit {op.rid} at version {op.version} is lost: the store "
                    f"ends at version {head.version if head else 'none'}",
                    versions=(op.version,), lines=op.lines)
            elif op.version <= base:
                ctx.unverified.append(Unverified(
                    "acked", process, f"acknowledged version {op.version} ({op.rid}) was "
                    "trimmed before the observer copied it", lines=op.lines))
            else:
                yield Anomaly(
                    "acked", process,
                    f"acknowledged commit {op.rid} at version {op.version} is missing from "
                    "the stream", versions=(op.version,), lines=op.lines)


def check_refused(ctx: Context) -> Iterator[Anomaly]:
    """An operation reported as definitely not committed (``fail``) never commits."""
    for process in ctx.processes:
        for op in ctx.ops_by_process.get(process, ()):
            if op.outcome != "fail":
                continue
            found = ctx.where(process, op.rid)
            if found:
                yield Anomaly(
                    "refused", process,
                    f"request {op.rid} was reported as {op.code or 'failed'} but is stored at "
                    f"version(s) {', '.join(str(e.version) for e in found)}",
                    versions=tuple(e.version for e in found),
                    tokens=tuple(e.token for e in found), lines=op.lines)


def check_unique(ctx: Context) -> Iterator[Anomaly]:
    """(3) No request key commits twice."""
    for process in ctx.processes:
        by_rid: dict[str, list[ChainEntry]] = defaultdict(list)
        for _, entry in sorted(ctx.chain(process).items()):
            if entry.rid is not None:
                by_rid[entry.rid].append(entry)
        for rid, entries in sorted(by_rid.items()):
            if len(entries) > 1:
                op = ctx.ops.get(rid)
                yield Anomaly(
                    "unique", process,
                    f"request {rid} committed {len(entries)} times, at versions "
                    f"{', '.join(str(e.version) for e in entries)}",
                    versions=tuple(e.version for e in entries),
                    tokens=tuple(e.token for e in entries),
                    lines=op.lines if op else ())


def check_phantom(ctx: Context) -> Iterator[Anomaly]:
    """No stored request id was never invoked (on the same process)."""
    for process in ctx.processes:
        for version, entry in sorted(ctx.chain(process).items()):
            if entry.rid is None or not entry.rid:
                continue
            op = ctx.ops.get(entry.rid)
            if op is None or op.process != process:
                yield Anomaly("phantom", process,
                              f"version {version} commits request {entry.rid}, which no client "
                              "of this process invoked",
                              versions=(version,), tokens=(entry.token,))


def check_tokens(ctx: Context) -> Iterator[Anomaly]:
    """(4) No entry carries a token below one that had already claimed the process."""
    by_process: dict[str, list[Event]] = defaultdict(list)
    for ev in ctx.fences:
        by_process[str(ev.get("process"))].append(ev)
    for process in ctx.processes:
        log = ctx.log(process)
        chain = ctx.chain(process)
        flagged: set[int] = set()
        # tokens in version order, snapshots included (a snapshot is written at the head)
        points: list[tuple[int, int, str]] = [(v, e.token, "entry") for v, e in chain.items()]
        points += [(s.version, s.token, "snapshot") for s in log.snapshots]
        points.sort(key=lambda p: (p[0], p[2] != "entry"))
        top: tuple[int, int, str] | None = None
        for version, token, what in points:
            if top is not None and token < top[1] and what == "entry":
                flagged.add(version)
                yield Anomaly(
                    "tokens", process,
                    f"stale owner: version {version} was committed with token {token} after "
                    f"token {top[1]} had written version {top[0]} ({top[2]})",
                    versions=(top[0], version), tokens=(top[1], token),
                    lines=_op_lines(ctx.acked_at(process, version)))
            if top is None or token > top[1]:
                top = (version, token, what)
        for version, entry in sorted(chain.items()):
            if log.head is not None and entry.token > log.fence and version not in flagged:
                flagged.add(version)
                yield Anomaly("tokens", process,
                              f"version {version} carries token {entry.token} above the final "
                              f"fence {log.fence}", versions=(version,),
                              tokens=(entry.token, log.fence))
        for ev in by_process.get(process, ()):
            fence, head = ev.get("fence"), ev.get("head")
            if not isinstance(fence, int) or not isinstance(head, int):
                continue
            for version, entry in sorted(chain.items()):
                if version > head and entry.token < fence and version not in flagged:
                    flagged.add(version)
                    yield Anomaly(
                        "tokens", process,
                        f"stale owner: version {version} was committed with token "
                        f"{entry.token} although the fence was already at {fence} when the "
                        f"head was at version {head} (history line {ev.get('line')})",
                        versions=(head, version), tokens=(fence, entry.token),
                        lines=(int(ev.get("line", 0)),
                               *_op_lines(ctx.acked_at(process, version))))


def check_restore(ctx: Context) -> Iterator[Anomaly]:
    """(5) Every snapshot plus its tail replays to the live head (and the final state).

    The final snapshot is replayed to the head exactly as a new owner would.
    The oldest snapshot with a complete tail is replayed too, which verifies
    every record's resulting root hash on the way; every snapshot in between
    is then checked against the verified state at its version (same root
    hash, chain head and position), which is equivalent to replaying it and
    costs O(snapshot) instead of O(tail).
    """
    for process in ctx.processes:
        log = ctx.log(process)
        head = log.head
        if head is None:
            continue
        chain = ctx.chain(process)
        base = base_version(log)
        target = (head.version, head.root_hash, head.chain_head, head.position)
        final_proc: Process | None = None
        by_version: dict[int, SnapshotRecord] = {}
        for snap in sorted(log.snapshots, key=lambda s: s.source != "final"):
            if snap.version <= head.version:
                by_version.setdefault(snap.version, snap)
        final_snap = log.final_snapshot
        order = ([final_snap] if final_snap is not None else []) + [
            by_version[v] for v in sorted(by_version)
            if final_snap is None or v != final_snap.version]
        verified_from: int | None = None
        for snap in order:
            is_final = snap is final_snap
            if not is_final and verified_from is not None and snap.version > verified_from:
                entry = chain.get(snap.version)
                cheap = restore_snapshot(process, snap)
                if isinstance(cheap, str):
                    yield Anomaly("restore", process, cheap, versions=(snap.version,),
                                  tokens=(snap.token,))
                elif entry is not None and entry.record is not None and (
                    cheap.root_hash != entry.record.resulting_root_hash
                    or cheap.chain_head != entry.record.event_hash
                    or cheap.position != entry.record.position
                ):
                    yield Anomaly("restore", process,
                                  f"the snapshot at {snap.version} differs from the state the "
                                  "log reaches at that version (root, chain head or position)",
                                  versions=(snap.version,), tokens=(snap.token, entry.token))
                continue
            result = replay(process, snap, chain, head.version, base)
            if isinstance(result, str):
                if result.startswith("missing:"):
                    if is_final:
                        yield Anomaly("restore", process,
                                      f"restore from the snapshot at {snap.version} is "
                                      f"impossible: version {result[8:]} is missing",
                                      versions=(snap.version, int(result[8:])))
                    continue
                yield Anomaly("restore", process, result, versions=(snap.version,),
                              tokens=(snap.token,))
                continue
            if (result.version, result.root_hash, result.chain_head, result.position) != target:
                yield Anomaly("restore", process,
                              f"restoring the snapshot at {snap.version} plus its tail gives "
                              f"version {result.version} root {result.root_hash[:12]}, the head "
                              f"says version {head.version} root {head.root_hash[:12]}",
                              versions=(snap.version, head.version))
                continue
            if is_final:
                final_proc = result
            else:
                verified_from = snap.version
        final = ctx.finals.get(process)
        if final is not None and final_proc is not None:
            version = final.get("version")
            if isinstance(version, int) and version != head.version:
                yield Anomaly("restore", process,
                              f"the gateway served version {version} after healing, the store "
                              f"holds {head.version}", versions=(version, head.version),
                              lines=(int(final.get("line", 0)),))
            root = final.get("root_hash")
            if isinstance(root, str) and version == head.version and root != head.root_hash:
                yield Anomaly("restore", process,
                              f"the gateway's root hash at version {version} differs from the "
                              "restored state", versions=(head.version,),
                              lines=(int(final.get("line", 0)),))
            count = final.get("count")
            stored = final_proc.read(COUNT_PATH)
            if isinstance(count, int) and version == head.version and count != stored:
                yield Anomaly("restore", process,
                              f"the gateway's {COUNT_PATH} is {count} at version {version}, the "
                              f"restored state holds {stored}", versions=(head.version,),
                              lines=(int(final.get("line", 0)),))


def _final_count(ctx: Context, process: str) -> tuple[int | None, str]:
    restored = ctx.restored(process)
    if restored is not None:
        count = restored.read(COUNT_PATH)
        return (count if isinstance(count, int) else None), "store"
    final = ctx.finals.get(process)
    if final is not None and isinstance(final.get("count"), int):
        return int(final["count"]), "gateway"
    return None, "none"


def check_memory(ctx: Context) -> Iterator[Anomaly]:
    """(6) ``acked <= final count <= acked + unknown`` for every process."""
    for process in ctx.processes:
        ops = ctx.ops_by_process.get(process, [])
        if not ops:
            continue
        acked = {op.rid for op in ops if op.outcome == "ok"}
        unknown = {op.rid for op in ops if op.outcome in ("info", "pending")}
        count, source = _final_count(ctx, process)
        if count is None:
            ctx.unverified.append(Unverified("memory", process,
                                             "no final state to compare the counts with"))
            continue
        if not len(acked) <= count <= len(acked) + len(unknown):
            yield Anomaly(
                "memory", process,
                f"final count {count} ({source}) is outside [acked {len(acked)}, acked + "
                f"unknown {len(acked) + len(unknown)}]",
                lines=_op_lines(op for op in ops if op.outcome == "ok")[:20])


def outbox_event(sink: str, statuses: Iterable[IntentStatus], record: DestinationRecord | None,
                 *, drained: bool, error: str | None = None,
                 summaries: Iterable[OutboxSummary] = ()) -> dict[str, Any]:
    """The fields of the ``outbox`` history event (what :func:`check_outbox` reads offline).

    Args:
        sink: the destination process.
        statuses: ``delivery_status(client, senders)`` values.
        record: ``destination_records(client, sink)`` (None if it could not be read).
        drained: no intent was pending when the harness stopped waiting.
        error: why ``record`` is missing, if it is.
        summaries: ``outbox_summary(client, senders)`` values: the dispatcher
            trims acknowledged outbox entries, so a delivered intent older than
            a sender's ``first_retained_version`` is no longer listed.
    """
    doc: dict[str, Any] = {
        "sink": sink, "drained": drained,
        "intents": [{"id": s.intent_id, "source": s.source, "version": s.version, "to": s.to,
                     "state": str(s.state), "redriven": s.redriven, "reason": s.reason,
                     "error": s.error,
                     **({"due_ms": s.due_ms} if s.due_ms is not None else {}),
                     **({"cancels": s.cancels} if s.cancels is not None else {})}
                    for s in statuses],
    }
    trimmed = {s.process_id: {"committed": s.committed, "trimmed": s.trimmed,
                              "first_retained_version": s.first_retained_version}
               for s in summaries if s.trimmed}
    if trimmed:
        doc["trimmed"] = trimmed
    if record is not None:
        doc["destination"] = {
            "process_id": record.process_id, "version": record.version,
            "appends": dict(record.appends), "log_complete": record.log_complete,
            "inbox_copies": dict(record.inbox_copies),
            "delivered_slots": sorted(record.delivered_slots),
        }
    if error:
        doc["error"] = error
    return doc


def _sent_intents(ctx: Context) -> dict[str, tuple[str, int]]:
    """Intent id -> (process, version) for every stored entry that staged an intent."""
    out: dict[str, tuple[str, int]] = {}
    for process in ctx.processes:
        for version, entry in sorted(ctx.chain(process).items()):
            if entry.record is None:
                continue
            for m in entry.record.mutations:
                if m.op == "set" and m.path == SENT_PATH and isinstance(m.value, str) \
                        and m.value:
                    out[m.value] = (process, version)
    return out


def _intent_index(intent_id: str) -> int:
    """The ``<index>`` of an intent id ``<sender>:<version>:<index>`` (-1 if none)."""
    tail = intent_id.rpartition(":")[2]
    return int(tail) if tail.isdigit() else -1


def check_outbox(ctx: Context) -> Iterator[Anomaly]:
    """(7) Every committed intent is dispatched at least once and recorded once at its sink."""
    events = [ev for ev in ctx.history if ev.get("kind") == "outbox"]
    wanted = any(ev.get("kind") == "meta" and ev.get("sink") for ev in ctx.history)
    if not events:
        if wanted:
            ctx.unverified.append(Unverified("outbox", None, "the run sent intents but "
                                             "recorded no outbox status"))
        return
    ev = events[-1]
    line = int(ev.get("line", 0))
    sink = str(ev.get("sink"))
    statuses = {str(i.get("id")): i for i in ev.get("intents") or () if isinstance(i, dict)}
    record = destination_record(ev.get("destination"))
    if record is None:
        ctx.unverified.append(Unverified(
            "outbox", sink, f"the destination's record was not read: {ev.get('error')}",
            lines=(line,)))
    committed = _sent_intents(ctx)
    raw_trimmed = ev.get("trimmed")
    trimmed: dict[str, Any] = raw_trimmed if isinstance(raw_trimmed, dict) else {}
    # The stream's entries are in (version, index) order and a trim removes a
    # prefix, so an intent not listed is trimmed when it comes before the first
    # retained entry: an older version, or the first retained version itself
    # when a later entry of that commit is listed (one commit can stage a send
    # and a timer or a cancel: index 0 trimmed, index 1 kept as the last entry).
    listed_at: dict[tuple[str, int], int] = {}
    for status in statuses.values():
        version = status.get("version")
        if isinstance(version, int):
            key = (str(status.get("source")), version)
            listed_at[key] = max(listed_at.get(key, -1), _intent_index(str(status.get("id"))))
    for iid, (sender, at) in sorted(committed.items()):
        cut = trimmed.get(sender)
        if iid not in statuses and isinstance(cut, dict):
            first = cut.get("first_retained_version")
            if (not isinstance(first, int) or at < first
                    or (at == first and listed_at.get((sender, at), -1) > _intent_index(iid))):
                # Trimmed: acknowledged by every consumer group and neither
                # pending nor dead-lettered (those stay listed). It must still
                # be recorded once at the sink, checked below like any delivery.
                statuses[iid] = {"id": iid, "source": sender, "version": at, "to": sink,
                                 "state": "delivered", "trimmed": True}
                continue
        if iid not in statuses:
            yield Anomaly("outbox", sender,
                          f"intent {iid} committed at version {at} is not in the "
                          "sender's outbox stream", versions=(at,), lines=(line,))
    for iid, status in sorted(statuses.items()):
        if "due_ms" in status or "cancels" in status or status.get("state") == "cancelled":
            # a timer (a remembered cancelled one has no due_ms) or a cancel entry:
            # invariant ``timers`` judges it
            continue
        process = str(status.get("source"))
        version = status.get("version")
        versions = (version,) if isinstance(version, int) else ()
        state = status.get("state")
        if state == "pending":
            yield Anomaly("outbox", process,
                          f"intent {iid} was never delivered (still pending after the "
                          f"dispatcher {'drained' if ev.get('drained') else 'had time to drain'})",
                          versions=versions, lines=(line,))
            continue
        if state == "dead_lettered":
            yield Anomaly("outbox", process,
                          f"intent {iid} was dead-lettered ({status.get('reason')}: "
                          f"{str(status.get('error'))[:160]})", versions=versions, lines=(line,))
            continue
        if state != "delivered":
            yield Anomaly("outbox", process, f"intent {iid} has unknown state {state!r}",
                          versions=versions, lines=(line,))
            continue
        if record is None or status.get("to") != sink:
            continue
        if not record.recorded(iid):
            appended = record.appends.get(iid, 0)
            if len(record.delivered_slots) >= DEDUP_WINDOW and appended <= 1:
                # The key may have aged out of the sink's bounded dedup window.
                if appended == 0 and not record.log_complete:
                    ctx.unverified.append(Unverified(
                        "outbox", sink, f"intent {iid} left the sink's dedup window and its "
                        "append was trimmed from the stored log", lines=(line,)))
                elif appended == 0:
                    yield Anomaly("outbox", sink, f"intent {iid} from {process} was delivered "
                                  "but never appended at the destination",
                                  versions=versions, lines=(line,))
                continue
            yield Anomaly("outbox", sink,
                          f"intent {iid} from {process} was delivered but the destination "
                          "has no record of it", versions=versions, lines=(line,))
        elif not record.recorded_once(iid):
            yield Anomaly("outbox", sink,
                          f"intent {iid} from {process} is recorded more than once at the "
                          f"destination ({record.appends.get(iid, 0)} appends in the stored "
                          f"log, {record.inbox_copies.get(iid, 0)} in /inbox)",
                          versions=versions, lines=(line,))


def check_ports(ctx: Context) -> Iterator[Anomaly]:
    """(8) Port calls: see :func:`svit_chaos.ports.check_ports` (skipped without a
    ``ports`` history event)."""
    yield from _check_ports(ctx)


def check_timers(ctx: Context) -> Iterator[Anomaly]:
    """(10) Durable timers: see :func:`svit_chaos.timers.check_timers` (skipped
    without a ``timers`` history event and without acknowledged arms)."""
    yield from _check_timers(ctx)


def check_leases(ctx: Context) -> Iterator[Anomaly]:
    """(9) Host leases under load: see :func:`svit_chaos.leases.check_leases`."""
    yield from _check_leases(ctx)


def _ranges(values: Sequence[int]) -> str:
    out: list[str] = []
    start = prev = None
    for v in values:
        if start is None:
            start = prev = v
        elif prev is not None and v == prev + 1:
            prev = v
        else:
            out.append(f"{start}" if start == prev else f"{start}..{prev}")
            start = prev = v
    if start is not None:
        out.append(f"{start}" if start == prev else f"{start}..{prev}")
    return ", ".join(out)


DEFAULT_INVARIANTS: tuple[tuple[str, Invariant], ...] = (
    ("chain", check_chain),
    ("acked", check_acked),
    ("refused", check_refused),
    ("unique", check_unique),
    ("phantom", check_phantom),
    ("tokens", check_tokens),
    ("restore", check_restore),
    ("memory", check_memory),
    ("outbox", check_outbox),
    ("ports", check_ports),
    ("leases", check_leases),
    ("timers", check_timers),
)


def check(
    history: Sequence[Event],
    logs: StoredLogs,
    *,
    invariants: Sequence[tuple[str, Invariant]] = DEFAULT_INVARIANTS,
    harness_errors: Sequence[str] = (),
    rid_path: str = RID_PATH,
) -> CheckResult:
    """Check a history against the stored logs.

    Args:
        history: events as read by :func:`~svit_chaos.history.read_history`.
        logs: the dumped logs (:func:`~svit_chaos.logs.read_logs`).
        invariants: ``(name, function)`` pairs run in order; a function that
            raises is reported as a harness error (the run is then inconclusive).
        harness_errors: errors the harness met while running (they make a run
            without anomalies inconclusive).
        rid_path: where the workload records each request id.

    Returns:
        The :class:`CheckResult`.
    """
    ctx = build_context(history, logs, rid_path=rid_path)
    anomalies: list[Anomaly] = []
    errors = list(harness_errors)
    for name, fn in invariants:
        try:
            anomalies.extend(fn(ctx))
        except Exception as exc:  # a broken invariant must not hide the rest
            errors.append(f"invariant {name} raised {type(exc).__name__}: {exc}")
    ops = list(ctx.ops.values())
    stats = {
        "processes": len(ctx.processes),
        "operations": len(ops),
        "ok": sum(op.outcome == "ok" for op in ops),
        "fail": sum(op.outcome == "fail" for op in ops),
        "info": sum(op.outcome == "info" for op in ops),
        "pending": sum(op.outcome == "pending" for op in ops),
        "entries": sum(len(c) for c in ctx.chains.values()),
        "snapshots": sum(len(ctx.log(p).snapshots) for p in ctx.processes),
        "fence_observations": len(ctx.fences),
        "invariants": [name for name, _ in invariants],
        "intents": sum(len(ev.get("intents") or ()) for ev in history
                       if ev.get("kind") == "outbox")
    }
    if anomalies:
        verdict = "fail"
    elif errors or ctx.unverified:
        verdict = "inconclusive"
    else:
        verdict = "pass"
    return CheckResult(verdict, anomalies, list(ctx.unverified), stats, errors)
