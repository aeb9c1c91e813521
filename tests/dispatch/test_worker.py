"""A real worker against a real redis-server: delivery, order, retry, dead letters, reclaim."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis

from svit_cluster.dispatch import (
    DeadLetters,
    DeliveryState,
    DispatchKeys,
    delivery_status,
    outbox_summary,
)
from tests._support import wait_for
from tests.dispatch._support import Sender, WebhookStub

pytestmark = pytest.mark.servers


def pid() -> str:
    return f"svit://t/{uuid.uuid4().hex[:10]}"


def stream_bodies(client: redis.Redis, name: str) -> list[tuple[str, Any]]:
    return [(f[b"id"].decode(), json.loads(f[b"body"])) for _, f in client.xrange(name)]


def lag_of(worker: Any, process: str) -> float | None:
    for metric in worker.worker.metrics.registry.collect():
        for sample in metric.samples:
            if sample.name == "svit_dispatch_lag" and sample.labels["process"] == process:
                return float(sample.value)
    return None


def all_settled(client: redis.Redis, prefix: str, senders: list[str]) -> Callable[[], bool]:
    def check() -> bool:
        status = delivery_status(client, senders, prefix=prefix)
        return bool(status) and all(s.state != DeliveryState.PENDING for s in status.values())
    return check


def test_delivers_in_commit_order_per_destination(rclient: redis.Redis, prefix: str,
                                                  make_worker: Any) -> None:
    a, b = Sender(rclient, pid(), prefix), Sender(rclient, pid(), prefix)
    sent: dict[str, list[str]] = {"integrations:x": [], "integrations:y": []}
    for i in range(30):
        for sender in (a, b):
            dest = "integrations:x" if i % 3 else "integrations:y"
            sent[dest] += sender.send(to=f"redis-stream://{dest}", body={"i": i})
    worker = make_worker()
    wait_for(all_settled(rclient, prefix, [a.pid, b.pid]), what="delivery")
    status = delivery_status(rclient, [a.pid, b.pid], prefix=prefix)
    # Delivered entries are trimmed: counts come from the summary.
    summary = outbox_summary(rclient, [a.pid, b.pid], prefix=prefix)
    assert [(s.committed, s.delivered, s.pending) for s in summary.values()] == [(30, 30, 0)] * 2
    wait_for(lambda: lag_of(worker, a.pid) == 0.0, what="lag gauge at 0")
    assert {s.state for s in status.values()} == {DeliveryState.DELIVERED}
    for dest, ids in sent.items():
        got = [iid for iid, _ in stream_bodies(rclient, dest)]
        assert sorted(got) == sorted(ids)  # each exactly once (the sink deduplicates)
        for sender in (a.pid, b.pid):  # per sender: commit order
            assert [g for g in got if g.startswith(sender)] == [
                i for i in ids if i.startswith(sender)]
        rclient.delete(dest, f"{dest}:svit-dedup", f"{{{dest}}}:svit-dedup")


def test_webhook_retries_with_the_same_key_then_delivers(
        rclient: redis.Redis, prefix: str, make_worker: Any, stub: WebhookStub) -> None:
    sender = Sender(rclient, pid(), prefix)
    ids = [sender.send(to=f"{stub.base}/flaky", body=n)[0] for n in range(3)]
    worker = make_worker(max_attempts=5)
    wait_for(all_settled(rclient, prefix, [sender.pid]), what="delivery")
    metrics = worker.worker.metrics
    assert metrics.delivered.labels("webhook")._value.get() == 3
    assert metrics.retried.labels("webhook")._value.get() == 3 * stub.flaky_failures
    assert metrics.delay.labels("webhook")._sum.get() > 0
    assert all(s.state == DeliveryState.DELIVERED
               for s in delivery_status(rclient, [sender.pid], prefix=prefix).values())
    keys = [k for k in stub.keys_for("/flaky") if k in ids]
    assert sorted(set(keys)) == sorted(ids)
    assert all(keys.count(i) == stub.flaky_failures + 1 for i in ids)  # every attempt keyed
    assert keys == sorted(keys, key=ids.index)  # one at a time, in commit order


def test_bad_input_is_dead_lettered_never_dropped(
        rclient: redis.Redis, prefix: str, make_worker: Any, stub: WebhookStub) -> None:
    sender = Sender(rclient, pid(), prefix)
    cases = {
        "unknown_scheme": "ftp://example.org/x",
        "host_not_allowed": f"http://localhost:{stub.port}/ok",
        "stream_not_allowed": f"redis-stream://{prefix}:{{p}}:outbox",
        "redirect": f"{stub.base}/redirect",
        "exhausted": f"{stub.base}/fail",
    }
    ids = {reason: sender.send(to=to, body="x")[0] for reason, to in cases.items()}
    ids["body_too_large"] = sender.send(to=f"{stub.base}/ok", body="y" * 3000)[0]
    # a sink timeout far above any scheduling delay: each of the two attempts
    # at /fail must reach the stub (a timed-out attempt may never reach it;
    # timeouts have their own test below)
    make_worker(max_body_bytes=2048, sink_timeout_s=30.0, max_attempts=2)
    wait_for(all_settled(rclient, prefix, [sender.pid]), what="dead letters")
    status = delivery_status(rclient, [sender.pid], prefix=prefix)
    for reason, iid in ids.items():
        st = status[iid]
        assert st.state == DeliveryState.DEAD_LETTERED, (reason, st)
        assert st.reason == reason
    assert "500" in (status[ids["exhausted"]].error or "")
    letters = {d.intent_id: d for d in DeadLetters(rclient, prefix).list()}
    assert letters[ids["exhausted"]].attempts == 2
    assert letters[ids["unknown_scheme"]].attempts == 0
    assert all(h.host == f"127.0.0.1:{stub.port}" for h in stub.hits)  # never localhost
    assert stub.keys_for("/fail").count(ids["exhausted"]) == 2


def test_a_sink_that_never_answers_is_retried_then_dead_lettered(
        rclient: redis.Redis, prefix: str, make_worker: Any, stub: WebhookStub) -> None:
    sender = Sender(rclient, pid(), prefix)
    iid = sender.send(to=f"{stub.base}/hang", body=1)[0]
    make_worker(sink_timeout_s=0.3, max_attempts=2)
    wait_for(all_settled(rclient, prefix, [sender.pid]), what="dead letter")
    st = delivery_status(rclient, [sender.pid], prefix=prefix)[iid]
    assert st.state == DeliveryState.DEAD_LETTERED, st
    assert st.reason == "exhausted"
    assert "did not answer within 0.3 s" in (st.error or "")
    letters = {d.intent_id: d for d in DeadLetters(rclient, prefix).list()}
    assert letters[iid].attempts == 2


def test_redrive_delivers_dead_letters_with_the_same_key(
        rclient: redis.Redis, prefix: str, make_worker: Any, stub: WebhookStub) -> None:
    sender = Sender(rclient, pid(), prefix)
    stub.rejecting = True
    try:
        ids = [sender.send(to=f"{stub.base}/reject", body=n)[0] for n in range(3)]
        make_worker()
        wait_for(all_settled(rclient, prefix, [sender.pid]), what="dead letters")
        dead = DeadLetters(rclient, prefix)
        letters = [d for d in dead.list() if d.intent_id in ids]
        assert [d.reason for d in letters] == ["rejected"] * 3
        stub.rejecting = False
        result = dead.redrive([d.id for d in letters] + ["1-1"])
        assert result.missing == ("1-1",) and len(result.redriven) == 3
        assert dead.redrive([letters[0].id]).missing == (letters[0].id,)  # moves once
        wait_for(lambda: all(s.state == DeliveryState.DELIVERED for s in delivery_status(
            rclient, [sender.pid], prefix=prefix).values()), what="re-drive")
        status = delivery_status(rclient, [sender.pid], prefix=prefix)
        assert all(s.redriven for s in status.values())
        assert dead.count() == 0
        assert sorted(set(stub.keys_for("/reject")) & set(ids)) == sorted(ids)
    finally:
        stub.rejecting = True


def test_crashed_consumer_entries_are_reclaimed_before_newer_ones(
        rclient: redis.Redis, prefix: str, make_worker: Any) -> None:
    sender = Sender(rclient, pid(), prefix)
    keys = DispatchKeys(prefix)
    stream = keys.outbox(sender.pid)
    ids = [sender.send(to="redis-stream://integrations:reclaim", body=n)[0] for n in range(10)]
    # A worker that "crashed" after reading 4 entries, still holding the claim.
    rclient.xgroup_create(stream, "svit-dispatch", id="0")
    rclient.xreadgroup("svit-dispatch", "crashed", {stream: ">"}, count=4)
    rclient.set(keys.claim(stream), "crashed", px=800)
    worker = make_worker(claim_idle_s=1.0)
    wait_for(all_settled(rclient, prefix, [sender.pid]), what="reclaim")
    got = [iid for iid, _ in stream_bodies(rclient, "integrations:reclaim")]
    assert got == ids  # the reclaimed four first: commit order held across the takeover
    metric = worker.worker.metrics.reclaimed._value.get()
    assert metric == 4
    assert rclient.xpending(stream, "svit-dispatch")["pending"] == 0
    rclient.delete("integrations:reclaim", "integrations:reclaim:svit-dedup",
                   "{integrations:reclaim}:svit-dedup")


def test_poison_entry_is_dead_lettered(rclient: redis.Redis, prefix: str,
                                       make_worker: Any) -> None:
    sender = Sender(rclient, pid(), prefix)
    stream = DispatchKeys(prefix).outbox(sender.pid)
    (iid,) = sender.send(to="redis-stream://integrations:poison", body=1)
    rclient.xgroup_create(stream, "svit-dispatch", id="0")
    ((_, entries),) = rclient.xreadgroup("svit-dispatch", "crashed", {stream: ">"}, count=1)
    rclient.xclaim(stream, "svit-dispatch", "crashed", 0, [entries[0][0]], retrycount=30)
    make_worker(claim_idle_s=0.0)
    wait_for(all_settled(rclient, prefix, [sender.pid]), what="poison")
    st = delivery_status(rclient, [sender.pid], prefix=prefix)[iid]
    assert st.state == DeliveryState.DEAD_LETTERED and st.reason == "poison"


def test_workers_partition_streams_and_scale_out(rclient: redis.Redis, prefix: str,
                                                 make_worker: Any) -> None:
    senders = [Sender(rclient, pid(), prefix) for _ in range(8)]
    for s in senders:
        s.send(to="redis-stream://integrations:scale", body=0)
    w1 = make_worker()
    wait_for(all_settled(rclient, prefix, [s.pid for s in senders]), what="first round")
    w2 = make_worker()
    keys = DispatchKeys(prefix)

    def balanced() -> bool:
        a, b = set(w1.worker.owned_streams), set(w2.worker.owned_streams)
        return bool(a) and bool(b) and not a & b and len(a | b) == 9  # 8 + re-drive
    wait_for(balanced, what="rebalance")
    for s in senders:
        holder = rclient.get(keys.claim(keys.outbox(s.pid)))
        assert holder is not None
    for n in range(1, 4):
        for s in senders:
            s.send(to="redis-stream://integrations:scale", body=n)
    wait_for(all_settled(rclient, prefix, [s.pid for s in senders]), what="second round")
    got = [iid for iid, _ in stream_bodies(rclient, "integrations:scale")]
    assert len(got) == len(set(got)) == 32
    rclient.delete("integrations:scale", "integrations:scale:svit-dedup",
                   "{integrations:scale}:svit-dedup")


def test_old_consumer_names_are_pruned(rclient: redis.Redis, prefix: str, make_worker: Any,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from svit_cluster.dispatch import _worker

    monkeypatch.setattr(_worker, "_PRUNE_EVERY_SCANS", 1)
    monkeypatch.setattr(_worker, "_PRUNE_IDLE_CLAIMS", 0.0)
    sender = Sender(rclient, pid(), prefix)
    stream = DispatchKeys(prefix).outbox(sender.pid)
    sender.send(to="redis-stream://integrations:prune", body=1)
    rclient.xgroup_create(stream, "svit-dispatch", id="0")
    rclient.xgroup_createconsumer(stream, "svit-dispatch", "gone-worker")
    worker = make_worker()
    sender.send(to="redis-stream://integrations:prune", body=2)
    wait_for(all_settled(rclient, prefix, [sender.pid]), what="delivery")
    wait_for(lambda: [c["name"] for c in rclient.xinfo_consumers(stream, "svit-dispatch")]
             == [worker.worker.name.encode()], what="pruned")
    rclient.delete("integrations:prune", "integrations:prune:svit-dedup",
                   "{integrations:prune}:svit-dedup")
