"""Outbox trimming: an entry goes only once every consumer
group acknowledged it; status counts stay right; memory per process stays flat.

Real redis-server and real Redis Cluster (``rclient``/``make_worker`` run each
test on both), real commits through the fenced commit script.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
import redis

from svit_cluster.control import ProcessController, decode_request
from svit_cluster.dispatch import (
    DeliveryState,
    DispatchKeys,
    delivery_status,
    outbox_summary,
    trim_acked,
)
from svit_cluster.process import Process, encode_value
from svit_cluster.store import ProcessKeys, RedisBackend, StoreConfig
from tests._support import wait_for
from tests.dispatch._support import SEND, Sender

pytestmark = pytest.mark.servers


def pid() -> str:
    return f"svit://t/{uuid.uuid4().hex[:10]}"


def ids(client: redis.Redis, stream: str) -> list[str]:
    return [(e.decode() if isinstance(e, bytes) else e) for e, _ in client.xrange(stream)]


def test_trim_never_drops_what_a_lagging_group_has_not_acknowledged(
        rclient: redis.Redis, prefix: str) -> None:
    sender = Sender(rclient, pid(), prefix)
    for i in range(10):
        sender.send(to="redis-stream://integrations:x", body={"i": i})
    stream = DispatchKeys(prefix).outbox(sender.pid)
    all_ids = ids(rclient, stream)
    assert len(all_ids) == 10
    assert trim_acked(rclient, stream) == (0, "")  # no group: nobody acknowledged anything

    # Group "fast" reads and acknowledges everything; "slow" read 6, acked 3.
    for group in ("fast", "slow"):
        rclient.xgroup_create(stream, group, id="0")
    rclient.xreadgroup("fast", "c1", {stream: ">"}, count=100)
    rclient.xack(stream, "fast", *all_ids)
    rclient.xreadgroup("slow", "c2", {stream: ">"}, count=6)
    rclient.xack(stream, "slow", *all_ids[:3])

    removed, minid = trim_acked(rclient, stream)
    assert (removed, minid) == (3, all_ids[3])  # the slow group's oldest pending entry
    assert ids(rclient, stream) == all_ids[3:]
    # Every entry not acknowledged by some group is still there (the negative check).
    pending = {r["message_id"].decode() for r in
               rclient.xpending_range(stream, "slow", min="-", max="+", count=100)}
    assert pending == set(all_ids[3:6]) and pending <= set(ids(rclient, stream))

    # A group created at 0 that has read nothing blocks any further trim.
    rclient.xgroup_create(stream, "new", id="0")
    rclient.xack(stream, "slow", *all_ids[3:6])
    assert trim_acked(rclient, stream)[0] == 0
    assert ids(rclient, stream) == all_ids[3:]

    # Once every group acknowledged everything, only the newest entry is kept.
    rclient.xreadgroup("slow", "c2", {stream: ">"}, count=100)
    rclient.xack(stream, "slow", *all_ids[6:])
    rclient.xreadgroup("new", "c3", {stream: ">"}, count=100)
    rclient.xack(stream, "new", *all_ids[3:])
    assert trim_acked(rclient, stream) == (6, all_ids[-1])
    assert ids(rclient, stream) == all_ids[-1:]
    assert rclient.xinfo_stream(stream)["entries-added"] == 10


def test_worker_trims_after_delivery_and_status_counts_stay_right(
        rclient: redis.Redis, prefix: str, make_worker: Any) -> None:
    sender = Sender(rclient, pid(), prefix)
    stream = DispatchKeys(prefix).outbox(sender.pid)
    sent = [iid for i in range(30)
            for iid in sender.send(to="redis-stream://integrations:t", body={"i": i})]
    # Not an allowed redis-stream prefix: dead-lettered at once.
    dead_iid = sender.send(to="redis-stream://elsewhere", body={})[0]
    # A second consumer group (say, an audit reader) that lags behind.
    rclient.xgroup_create(stream, "audit", id="0")
    make_worker()

    def settled() -> bool:
        s = outbox_summary(rclient, [sender.pid], prefix=prefix)[sender.pid]
        return s.pending == 0 and s.committed == 31

    wait_for(settled, what="every intent settled")
    # The worker acknowledged all 31 but "audit" acknowledged none: nothing trimmed.
    assert len(ids(rclient, stream)) == 31

    audit = rclient.xreadgroup("audit", "a1", {stream: ">"}, count=100)
    rclient.xack(stream, "audit", *[e for e, _ in audit[0][1]])
    sent += sender.send(to="redis-stream://integrations:t", body={"i": "last"})  # wakes it

    def trimmed() -> bool:
        s = outbox_summary(rclient, [sender.pid], prefix=prefix)[sender.pid]
        return s.pending == 0 and s.trimmed >= 30

    wait_for(trimmed, what="the worker's trim")
    assert len(ids(rclient, stream)) <= 2  # the last acknowledged entry (+ the audit's one)
    summary = outbox_summary(rclient, [sender.pid], prefix=prefix)[sender.pid]
    assert (summary.committed, summary.delivered, summary.dead_lettered, summary.pending) \
        == (32, 31, 1, 0)
    assert summary.first_retained_version is not None and summary.first_retained_version >= 31
    status = delivery_status(rclient, [sender.pid], prefix=prefix)
    # The dead-lettered intent stays visible although its outbox entry is gone.
    assert status[dead_iid].state == DeliveryState.DEAD_LETTERED
    assert status[dead_iid].to == "redis-stream://elsewhere"
    assert not any(s.state == DeliveryState.PENDING for s in status.values())
    delivered = [json.loads(f[b"body"])["i"] for _, f in rclient.xrange("integrations:t")]
    assert delivered[:30] == list(range(30))  # nothing lost to the trim


def _memory(client: redis.Redis, keys: list[str]) -> int:
    return sum(int(client.memory_usage(k, samples=0) or 0) for k in keys)


def test_memory_per_process_is_flat_over_many_commits(
        rclient: redis.Redis, prefix: str, make_worker: Any) -> None:
    """Tail + receipts + signals + outbox of one process: the same after 1 600
    commits as after 400 (small retention settings so the bounds are reached
    quickly; the defaults only move where it flattens). The snapshot holds the
    process state, which this script grows by one ``/system/outbox`` intent per
    commit, so it is checked against the state's own size instead."""
    p = pid()
    config = StoreConfig(prefix=prefix, max_receipts=32, snapshot_every=32,
                         signal_retention=64)
    backend = RedisBackend(rclient, p, 1, config)
    backend.claim()
    proc = Process.create(p, memory={"n": 0}, scripts={"send": SEND})
    backend.create(proc)
    ctrl = ProcessController(proc, backend)
    pk = ProcessKeys(p, prefix)
    bookkeeping = [k for k in pk.all() if k != pk.snapshot]
    make_worker(batch_size=16)

    def commit(n: int) -> None:
        request = {
            "protocol": "svit-control@1", "client_id": "t", "request_id": f"r{n}",
            "process_id": p, "expected_version": ctrl.process.version,
            "command": {"operation": "activate", "script": "send",
                        "input": encode_value({"to": "redis-stream://integrations:m",
                                               "body": {"n": n}})},
        }
        resp = ctrl.execute(decode_request(json.dumps(request).encode()))
        assert resp.outcome.status == "committed", resp.outcome

    def drained(total: int) -> Any:
        def check() -> bool:
            s = outbox_summary(rclient, [p], prefix=prefix)[p]
            return s.committed == total and s.pending == 0 and s.retained <= 1
        return check

    for n in range(400):
        commit(n)
    wait_for(drained(400), what="400 intents delivered and trimmed")
    at_400 = _memory(rclient, bookkeeping)
    for n in range(400, 1600):
        commit(n)
    wait_for(drained(1600), what="1600 intents delivered and trimmed")
    at_1600 = _memory(rclient, bookkeeping)
    assert rclient.xlen(pk.outbox) <= 1
    # Flat: 4x the commits, at most a few stream nodes more (allocator slack).
    assert at_1600 <= at_400 * 1.25 + 4096, (at_400, at_1600)
    # The snapshot is O(state), not O(history): about one encoded snapshot.
    state_bytes = len(rclient.hget(pk.snapshot, "data") or b"")
    assert _memory(rclient, [pk.snapshot]) <= 1.5 * state_bytes + 4096
