"""Builders of real logs and matching histories for checker tests (no fixtures here).

``Scenario`` drives :class:`svit_cluster.store.RedisBackend` (or, for pure unit
tests, an in-memory log) the way owners and clients would, and records the
matching history: invoke/ok for every acknowledged commit, with the request id
written to ``/memory/last`` exactly as the workload script does.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import redis
from svit_chaos.history import HistoryWriter
from svit_chaos.logs import HeadRecord, ProcessLog, SnapshotRecord, StoredEntry, StoredLogs

from svit_cluster.process import Process, Transition
from svit_cluster.store import RedisBackend, StoreConfig


def seal_op(process: Process, rid: str) -> Transition:
    """Seal (not apply) one workload-shaped change: last = rid, count += 1."""
    wc = process.working_copy()
    count = process.read("/memory/count")
    ops = process.read("/memory/ops")
    wc.write("/memory/last", rid)
    wc.write("/memory/count", (count if isinstance(count, int) else 0) + 1)
    wc.write("/memory/ops", [*(ops if isinstance(ops, list) else []), rid][-32:])
    return process.seal(wc, "activation")


def new_process(pid: str) -> Process:
    return Process.create(pid, memory={"count": 0, "last": "", "ops": []})


@dataclass
class MemoryLog:
    """An in-memory commit log (what Redis would hold), for pure checker tests."""

    pid: str
    token: int
    base: Process
    entries: dict[int, StoredEntry] = field(default_factory=dict)
    snapshots: list[SnapshotRecord] = field(default_factory=list)
    fence: int = 0

    def __post_init__(self) -> None:
        self.fence = max(self.fence, self.token)
        p = self.base
        self.snapshots.append(SnapshotRecord(self.pid, p.version, p.position, p.chain_head,
                                             p.root_hash, self.token, p.snapshot()))

    def commit(self, t: Transition, token: int) -> None:
        v = t.record.process_version_after
        self.entries[v] = StoredEntry(self.pid, v, token, t.record.encode())
        self.fence = max(self.fence, token)

    def snapshot(self, process: Process, token: int) -> None:
        self.snapshots.insert(0, SnapshotRecord(
            self.pid, process.version, process.position, process.chain_head,
            process.root_hash, token, process.snapshot()))

    def to_log(self, head: Process) -> ProcessLog:
        log = ProcessLog(self.pid)
        log.entries = dict(self.entries)
        # the newest snapshot is the "final" one; the others count as collected
        ordered = sorted(self.snapshots, key=lambda s: -s.version)
        log.snapshots = [ordered[0]] + [
            SnapshotRecord(s.process, s.version, s.position, s.chain_head, s.root_hash,
                           s.token, s.data, "collected") for s in ordered[1:]]
        last = max(self.entries) if self.entries else 0
        token = self.entries[last].token if self.entries else self.snapshots[-1].token
        log.head = HeadRecord(head.version, head.chain_head, head.root_hash, head.position,
                              token)
        log.fence = self.fence
        return log


class Clients:
    """Records workload-shaped operations in a history."""

    def __init__(self, history: HistoryWriter) -> None:
        self.history = history
        self.seq = itertools.count(1)

    def invoke(self, pid: str, expected: int, client: str = "c0") -> str:
        rid = f"t.{client}.{next(self.seq)}"
        self.history.record("invoke", client=client, process=pid, rid=rid, expected=expected)
        return rid

    def ok(self, pid: str, rid: str, version: int, client: str = "c0", **extra: Any) -> None:
        self.history.record("ok", client=client, process=pid, rid=rid, expected=version - 1,
                            version=version, previous=version - 1, **extra)

    def fail(self, pid: str, rid: str, client: str = "c0", **extra: Any) -> None:
        self.history.record("fail", client=client, process=pid, rid=rid, **extra)

    def info(self, pid: str, rid: str, client: str = "c0") -> None:
        self.history.record("info", client=client, process=pid, rid=rid, error="timeout")


def redis_new_log(client: redis.Redis, pid: str, token: int,
                  config: StoreConfig) -> tuple[RedisBackend, Process]:
    backend = RedisBackend(client, pid, token, config)
    backend.claim()
    proc = new_process(pid)
    backend.create(proc)
    return backend, proc


def redis_commit(backend: RedisBackend, proc: Process, clients: Clients,
                 client: str = "c0") -> int:
    """One acknowledged workload op committed through the real store."""
    rid = clients.invoke(proc.id, proc.version, client)
    t = seal_op(proc, rid)
    backend.commit(t)
    proc.commit(t)
    clients.ok(proc.id, rid, proc.version, client)
    return proc.version


def logs_of(*logs: ProcessLog) -> StoredLogs:
    out = StoredLogs()
    for log in logs:
        out.processes[log.process] = log
    return out
