"""Observers: own cursor per subscription, explicit server-side and client-side lag."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis

from svit_cluster.events import (
    BoundedFeed,
    Lagged,
    RedisSignalSource,
    Signal,
    SignalKind,
    SignalSource,
    observe,
    resolve_cursor,
)
from svit_cluster.inprocess import MemorySignals
from svit_cluster.process import Process
from svit_cluster.store import RedisBackend, StoreConfig
from tests.conftest import RedisTarget

pytestmark = pytest.mark.servers


class Writer:
    def __init__(self, client: redis.Redis, pid: str, prefix: str, retention: int) -> None:
        self.backend = RedisBackend(client, pid, 1,
                                    StoreConfig(prefix=prefix, signal_retention=retention))
        self.backend.claim()
        self.proc = Process.create(pid, memory={"n": 0})
        self.backend.create(self.proc)

    def commit(self, n: int = 1) -> None:
        for _ in range(n):
            wc = self.proc.working_copy()
            wc.write("/memory/n", self.proc.version + 1)
            t = self.proc.seal(wc, "host.write")
            self.backend.commit(t)
            self.proc.commit(t)


@pytest.fixture
async def source(redis_target: RedisTarget, prefix: str) -> AsyncIterator[RedisSignalSource]:
    src = RedisSignalSource.from_url(redis_target.url, prefix)
    try:
        yield src
    finally:
        await src.aclose()


async def take(source: SignalSource, pid: str, cursor: str, n: int,
               block_s: float = 0.2) -> list[Signal | Lagged]:
    out: list[Signal | Lagged] = []
    async for item in observe(source, pid, cursor, batch=7, block_s=block_s):
        if item is None:
            break
        out.append(item)
        if len(out) == n:
            break
    return out


async def test_each_subscription_has_its_own_cursor(
    rclient: redis.Redis, source: RedisSignalSource, pid: str, prefix: str
) -> None:
    w = Writer(rclient, pid, prefix, 10_000)
    w.commit(5)
    everything = await take(source, pid, "0", 100)
    assert [s.data["version"] for s in everything if isinstance(s, Signal)] == [1, 2, 3, 4, 5]
    middle = everything[2]
    assert isinstance(middle, Signal)
    rest = await take(source, pid, middle.id, 100)
    assert [s.data["version"] for s in rest if isinstance(s, Signal)] == [4, 5]
    now = await resolve_cursor(source, pid, "$")
    assert now == everything[-1].id  # type: ignore[union-attr]
    # a live subscriber blocks until the next commit, then sees exactly it
    live = asyncio.ensure_future(take(source, pid, now, 1, block_s=5.0))
    await asyncio.sleep(0.1)
    w.commit()
    (sig,) = await asyncio.wait_for(live, 5)
    assert isinstance(sig, Signal) and sig.kind is SignalKind.COMMITTED
    assert sig.data["version"] == 6


async def test_a_cursor_out_of_retention_gets_lagged_then_continues(
    rclient: redis.Redis, source: RedisSignalSource, pid: str, prefix: str
) -> None:
    w = Writer(rclient, pid, prefix, 16)
    w.commit(2)
    old = await resolve_cursor(source, pid, "$")
    w.commit(200)
    got = await take(source, pid, old, 2, block_s=0.3)
    assert isinstance(got[0], Lagged) and got[0].source == "server"
    window = await source.window(pid)
    assert got[0].resume == window.last and got[0].oldest is not None
    assert len(got) == 1  # nothing new after the resume point yet
    w.commit()
    after = await take(source, pid, got[0].resume, 1)
    assert isinstance(after[0], Signal) and after[0].data["version"] == 203
    # from the origin: lagged only because the stream was trimmed
    assert isinstance((await take(source, pid, "0", 1))[0], Lagged)


async def test_origin_of_an_untrimmed_stream_is_not_lagged(
    rclient: redis.Redis, source: RedisSignalSource, pid: str, prefix: str
) -> None:
    Writer(rclient, pid, prefix, 16).commit(3)
    got = await take(source, pid, "0", 3)
    assert all(isinstance(s, Signal) for s in got) and len(got) == 3


async def test_memory_source_has_the_same_semantics() -> None:
    mem = MemorySignals(retention=16)
    pid = "svit://test/mem"
    mem.register(pid)
    first = mem.add(pid, SignalKind.COMMITTED, {"version": 1})
    for v in range(2, 40):
        mem.add(pid, SignalKind.COMMITTED, {"version": v})
    got = await take(mem, pid, first.id, 1)
    assert isinstance(got[0], Lagged)
    live = asyncio.ensure_future(take(mem, pid, got[0].resume, 1, block_s=5.0))
    await asyncio.sleep(0.05)
    await asyncio.to_thread(mem.add, pid, SignalKind.COMMITTED, {"version": 40})
    (sig,) = await asyncio.wait_for(live, 5)
    assert isinstance(sig, Signal) and sig.data["version"] == 40


async def test_bounded_feed_overflow_becomes_one_lagged() -> None:
    feed: BoundedFeed[Any] = BoundedFeed(2)
    for i in range(5):
        feed.offer(i, f"{i}-0")
    feed.offer(5, "5-0")  # still full: dropped
    assert [await feed.get(), await feed.get()] == [0, 1]
    assert feed.offer(6, "6-0")
    lag = await feed.get()
    assert isinstance(lag, Lagged) and lag.missed == 4 and lag.source == "client"
    assert lag.resume == "5-0"
    assert await feed.get() == 6
