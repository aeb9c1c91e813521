"""Bounds of the dispatcher's own bookkeeping: the worker set, the per-stream
claim keys, the re-drive stream, the ``redis-stream://`` dedup window, and a
worker's in-memory view of the streams. (Consumer names:
``test_worker.py::test_old_consumer_names_are_pruned``; dead letters and
``:dead-settled``: ``test_dead_letter_bounds.py``.)

Real redis-server and real Redis Cluster (``redis_target``/``rclient``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
import redis

from svit_cluster.dispatch import (
    DeadLetters,
    DeliveryState,
    DispatchKeys,
    Intent,
    RedisStreamSink,
    delivery_status,
)
from svit_cluster.dispatch._claim import StreamClaims
from svit_cluster.dispatch._redisutil import async_client
from tests._support import wait_for
from tests.conftest import RedisTarget
from tests.dispatch._support import Sender, WebhookStub

pytestmark = pytest.mark.servers


def test_the_worker_set_keeps_only_live_workers(
        redis_target: RedisTarget, rclient: redis.Redis, prefix: str) -> None:
    keys = DispatchKeys(prefix)
    rclient.zadd(keys.workers, {f"gone-{i}": 1000 + i for i in range(50)})  # long expired

    async def run() -> list[str]:
        client = async_client(redis_target.url)
        try:
            return await StreamClaims(client, keys, "alive", claim_ttl_s=10,
                                      worker_ttl_s=5).heartbeat()
        finally:
            await client.aclose()

    assert asyncio.run(run()) == ["alive"]
    assert rclient.zrange(keys.workers, 0, -1) == [b"alive"]


def test_a_claim_key_expires_and_its_token_counter_stays_monotonic(
        redis_target: RedisTarget, rclient: redis.Redis, prefix: str) -> None:
    """``<stream>:lease`` goes ``claim_ttl_s`` after its last renewal. The
    ``:lease-token`` counter is one integer per stream, kept when the stream
    goes (a deleted process): a worker paused with token t must never meet a
    new counter that reaches t again."""
    keys = DispatchKeys(prefix)
    stream = keys.outbox(f"svit://t/{uuid.uuid4().hex[:10]}")
    rclient.xadd(stream, {"intent": "{}"})

    async def claim() -> int:
        client = async_client(redis_target.url)
        try:
            claims = StreamClaims(client, keys, f"w-{uuid.uuid4().hex[:6]}",
                                  claim_ttl_s=0.3, worker_ttl_s=1)
            return (await claims.claim([stream]))[stream]
        finally:
            await client.aclose()

    first = asyncio.run(claim())
    assert rclient.exists(DispatchKeys.claim(stream)) == 1
    time.sleep(0.5)  # never renewed
    assert rclient.exists(DispatchKeys.claim(stream)) == 0
    rclient.delete(stream)  # the process is deleted (the store's delete removes its outbox)
    assert rclient.get(DispatchKeys.claim_token(stream)) == str(first).encode()
    rclient.xadd(stream, {"intent": "{}"})  # ... and created again
    assert asyncio.run(claim()) == first + 1


async def test_the_redis_stream_sink_remembers_the_newest_window_of_ids(
        redis_target: RedisTarget, rclient: redis.Redis) -> None:
    name = f"integrations:dedup-{uuid.uuid4().hex[:8]}"
    dedup = f"{{{name}}}:svit-dedup" if redis_target.cluster else f"{name}:svit-dedup"
    client = async_client(redis_target.url)
    try:
        sink = RedisStreamSink(client, allowed_prefixes=("integrations:",),
                               store_prefix="svit", dedup_window=5)
        for i in range(12):
            await sink.deliver(Intent(
                id=f"svit://t/a:{i + 1}:0", to=f"redis-stream://{name}", body=i,
                source="svit://t/a", version=i + 1, stream="s", entry_id="1-0",
                origin_entry_id="1-0", committed_ms=1, raw=b""))
        # Scores are arrival milliseconds; ids that arrive in the same one are
        # evicted in member order, so only the count is exact.
        assert rclient.zcard(dedup) == 5
        assert rclient.xlen(name) == 12
    finally:
        rclient.delete(name, dedup)
        await client.aclose()


def test_the_redrive_stream_keeps_its_unacknowledged_entries_plus_one(
        rclient: redis.Redis, prefix: str, make_worker: Any, stub: WebhookStub) -> None:
    keys = DispatchKeys(prefix)
    sender = Sender(rclient, f"svit://t/{uuid.uuid4().hex[:10]}", prefix)
    stub.rejecting = True
    try:
        ids = [sender.send(to=f"{stub.base}/reject", body=n)[0] for n in range(8)]
        make_worker()
        wait_for(lambda: DeadLetters(rclient, prefix).count() == 8, 20, "eight dead letters")
        stub.rejecting = False
        assert len(DeadLetters(rclient, prefix).redrive().redriven) == 8
        wait_for(lambda: all(s.state is DeliveryState.DELIVERED for s in delivery_status(
            rclient, [sender.pid], prefix=prefix).values()), 20, "re-driven and delivered")
        wait_for(lambda: rclient.xlen(keys.redrive) <= 1, 10, "the re-drive stream trimmed")
        assert rclient.xinfo_stream(keys.redrive)["entries-added"] == 8
        assert set(ids) <= set(stub.keys_for("/reject"))
    finally:
        stub.rejecting = True


def test_a_workers_view_forgets_the_stream_of_a_deleted_process(
        rclient: redis.Redis, prefix: str, make_worker: Any) -> None:
    """The streams, groups, claims and lag gauges a worker tracks are those that
    exist now: a deleted process's outbox leaves them at the next scan."""
    keys = DispatchKeys(prefix)
    sender = Sender(rclient, f"svit://t/{uuid.uuid4().hex[:10]}", prefix)
    sender.send(to="redis-stream://integrations:forget", body=1)
    stream = keys.outbox(sender.pid)
    worker = make_worker().worker
    try:
        wait_for(lambda: stream in worker.owned_streams, 10, "the stream owned")
        gauge = worker.metrics.registry.get_sample_value
        wait_for(lambda: gauge("svit_dispatch_lag", {"process": sender.pid}) == 0, 10,
                 "its lag gauge")
        sender.ctrl.backend.delete()  # type: ignore[attr-defined]
        wait_for(lambda: stream not in worker.owned_streams, 10, "the stream released")
        wait_for(lambda: stream not in worker._streams and stream not in worker._grouped,
                 10, "the stream forgotten")
        assert gauge("svit_dispatch_lag", {"process": sender.pid}) is None
        assert rclient.exists(DispatchKeys.claim(stream)) == 0
    finally:
        rclient.delete("integrations:forget", "integrations:forget:svit-dedup",
                       "{integrations:forget}:svit-dedup")
