"""The gateway's fan-out hub: one store reader per process, own cursor per subscription."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from svit_cluster.events import Lagged, ReadResult, Signal, SignalHub, SignalKind
from svit_cluster.inprocess import MemorySignals

PID = "svit://test/hub"


class CountingSource(MemorySignals):
    """Memory signals that count blocking reads (store round trips that wait)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.blocking_reads = 0

    async def read(self, process_id: str, after: str, *, count: int, block_s: float
                   ) -> ReadResult:
        if block_s > 0:
            self.blocking_reads += 1
        return await super().read(process_id, after, count=count, block_s=block_s)


async def take(it: AsyncIterator[Signal | Lagged | None], n: int, timeout_s: float = 5.0
               ) -> list[Signal | Lagged]:
    out: list[Signal | Lagged] = []

    async def run() -> None:
        async for item in it:
            if item is not None:
                out.append(item)
                if len(out) == n:
                    return

    await asyncio.wait_for(run(), timeout_s)
    return out


def add(src: MemorySignals, n: int) -> None:
    for _ in range(n):
        src.add(PID, SignalKind.COMMITTED, {})


async def test_many_subscriptions_share_one_reader() -> None:
    src = CountingSource()
    src.register(PID)
    add(src, 3)
    hub = SignalHub(src, block_s=1.0)
    subs = [hub.subscribe(PID, "0-0") for _ in range(20)]
    firsts = await asyncio.gather(*(take(s, 3) for s in subs))
    assert all([x.id for x in f] == ["1-0", "2-0", "3-0"] for f in firsts)  # type: ignore[union-attr]
    before = src.blocking_reads
    for _ in range(5):
        add(src, 1)
        got = await asyncio.gather(*(take(s, 1) for s in subs))
        assert len({g[0].id for g in got}) == 1  # type: ignore[union-attr]
    assert src.blocking_reads - before <= 10  # not 20 subscriptions x 5 commits
    assert hub.readers() == 1
    for s in subs:
        await s.aclose()  # type: ignore[attr-defined]
    await asyncio.sleep(0)
    assert hub.readers() == 0


async def test_a_slow_subscription_is_detached_and_catches_up_without_gaps() -> None:
    src = MemorySignals()
    src.register(PID)
    hub = SignalHub(src, buffer=4, block_s=1.0)
    fast, slow = hub.subscribe(PID, "0-0"), hub.subscribe(PID, "0-0")
    add(src, 1)
    await take(fast, 1)
    await take(slow, 1)
    add(src, 30)  # slow does not read: its queue overflows, it is detached
    assert len(await take(fast, 30)) == 30
    rest = await take(slow, 30)
    assert [int(s.id.split("-")[0]) for s in rest] == list(range(2, 32))
    add(src, 1)
    assert (await take(slow, 1))[0].id == "32-0"


async def test_out_of_retention_subscription_gets_lagged() -> None:
    src = MemorySignals(retention=16)
    src.register(PID)
    add(src, 40)
    hub = SignalHub(src, block_s=1.0)
    (lag,) = await take(hub.subscribe(PID, "1-0"), 1)
    assert isinstance(lag, Lagged) and lag.resume == "40-0"
