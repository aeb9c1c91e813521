"""Resuming after retention trimmed the stream: lag means "something after my cursor is gone".

Ten ``committed`` signals v1..v10; an observer saw v1..v5 (cursor = id of v5);
retention then trims the head of the stream. Trimmed before the cursor or
exactly up to it, nothing the observer has not seen is gone: it must get
v6..v10 and no ``lagged``. Trimmed past the cursor (v6 gone), it must get
``lagged``. Checked on real Redis through every read path: :func:`observe`
(the SDK/observer path), :class:`SignalHub` and the gateway's SSE endpoint
served by uvicorn; plus the in-memory source, and a real ``MAXLEN ~`` trim.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import redis

from svit_cluster.events import (
    Lagged,
    RedisSignalSource,
    Signal,
    SignalHub,
    SignalKind,
    SignalSource,
    observe,
)
from svit_cluster.gateway import Principal, TokenStore, create_app
from svit_cluster.inprocess import InProcessRouter, MemorySignals
from svit_cluster.store import ProcessKeys
from tests.conftest import RedisTarget
from tests.events._server import serve
from tests.events.test_observer import Writer

pytestmark = pytest.mark.servers

ADMIN = "admin-token-0123456789"

# version of the first retained signal after the trim -> lagged expected?
BOUNDARIES = [(4, False), (5, False), (6, False), (7, True)]
BOUNDARY_IDS = ["trim-before-cursor", "trim-keeps-one-more", "trim-exactly-at-cursor",
                "trim-past-cursor"]


@pytest.fixture
async def source(redis_target: RedisTarget, prefix: str) -> AsyncIterator[RedisSignalSource]:
    src = RedisSignalSource.from_url(redis_target.url, prefix)
    try:
        yield src
    finally:
        await src.aclose()


def ten_then_trim(rclient: redis.Redis, pid: str, prefix: str, first_kept: int
                  ) -> tuple[str, dict[int, str]]:
    """Commit v1..v10, trim the head so ``first_kept`` is the oldest retained
    signal; returns (cursor = id of v5, {version: signal id})."""
    Writer(rclient, pid, prefix, 10_000).commit(10)
    key = ProcessKeys(pid, prefix).signals
    ids = {int(json.loads(f[b"data"])["version"]): eid.decode()
           for eid, f in rclient.xrange(key)}
    assert sorted(ids) == list(range(1, 11))
    rclient.xtrim(key, minid=ids[first_kept], approximate=False)
    assert rclient.xrange(key, count=1)[0][0].decode() == ids[first_kept]
    return ids[5], ids


def versions(items: list[Signal | Lagged]) -> list[int | str]:
    return ["lagged" if isinstance(i, Lagged) else int(i.data["version"]) for i in items]


async def take_observe(source: SignalSource, pid: str, cursor: str, n: int
                       ) -> list[Signal | Lagged]:
    out: list[Signal | Lagged] = []
    async for item in observe(source, pid, cursor, block_s=0.2):
        if item is None:
            break
        out.append(item)
        if len(out) == n:
            break
    return out


async def take_hub(source: SignalSource, pid: str, cursor: str, n: int
                   ) -> list[Signal | Lagged]:
    hub = SignalHub(source, block_s=0.2)
    out: list[Signal | Lagged] = []
    async for item in hub.subscribe(pid, cursor):
        if item is None:
            break
        out.append(item)
        if len(out) == n:
            break
    return out


def expected(lagged: bool) -> list[int | str]:
    return ["lagged"] if lagged else list(range(6, 11))


@pytest.mark.parametrize(("first_kept", "lagged"), BOUNDARIES, ids=BOUNDARY_IDS)
async def test_observer_resumes_after_a_trim_up_to_its_cursor(
    rclient: redis.Redis, source: RedisSignalSource, pid: str, prefix: str,
    first_kept: int, lagged: bool,
) -> None:
    cursor, ids = ten_then_trim(rclient, pid, prefix, first_kept)
    got = await take_observe(source, pid, cursor, 5)
    assert versions(got) == expected(lagged)
    if lagged:
        lag = got[0]
        assert isinstance(lag, Lagged)
        assert lag.resume == ids[10] and lag.oldest == ids[first_kept]


@pytest.mark.parametrize(("first_kept", "lagged"), BOUNDARIES, ids=BOUNDARY_IDS)
async def test_hub_subscription_resumes_after_a_trim_up_to_its_cursor(
    rclient: redis.Redis, source: RedisSignalSource, pid: str, prefix: str,
    first_kept: int, lagged: bool,
) -> None:
    cursor, _ = ten_then_trim(rclient, pid, prefix, first_kept)
    got = await take_hub(source, pid, cursor, 5)
    assert versions(got) == expected(lagged)


class RedisSignalsRouter(InProcessRouter):
    """The in-memory router, but observers read the real Redis signal stream."""

    def __init__(self, url: str, prefix: str) -> None:
        super().__init__()
        self._source = RedisSignalSource.from_url(url, prefix)

    def signal_source(self) -> SignalSource:
        return self._source


def sse_items(base: str, pid: str, cursor: str, n: int) -> list[tuple[str, dict[str, Any]]]:
    """The first ``n`` signal/lagged SSE events after ``ready`` (via Last-Event-ID)."""
    out: list[tuple[str, dict[str, Any]]] = []
    event = ""
    with httpx.stream("GET", base + "/v1/processes/events", params={"process_id": pid},
                      headers={"Authorization": f"Bearer {ADMIN}",
                               "Last-Event-ID": cursor},
                      timeout=httpx.Timeout(10.0)) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("event: "):
                event = line[len("event: "):]
            elif line.startswith("data: ") and event not in ("ready", "error"):
                out.append((event, json.loads(line[len("data: "):])))
                if len(out) == n or event == "lagged":
                    break
            elif line.startswith("data: ") and event == "error":
                raise AssertionError(line)
    return out


@pytest.fixture
def sse_url(redis_target: RedisTarget, prefix: str) -> Iterator[str]:
    tokens = TokenStore()
    tokens.add(ADMIN, Principal(tenant=None, admin=True))
    with serve(create_app(RedisSignalsRouter(redis_target.url, prefix), tokens)) as base:
        yield base


@pytest.mark.parametrize(("first_kept", "lagged"), BOUNDARIES, ids=BOUNDARY_IDS)
def test_sse_resume_after_a_trim_up_to_the_cursor(
    rclient: redis.Redis, sse_url: str, pid: str, prefix: str, first_kept: int,
    lagged: bool,
) -> None:
    cursor, ids = ten_then_trim(rclient, pid, prefix, first_kept)
    got = sse_items(sse_url, pid, cursor, 5)
    if lagged:
        assert [e for e, _ in got] == ["lagged"]
        assert got[0][1]["resume"] == ids[10]
    else:
        assert [e for e, _ in got] == ["committed"] * 5
        assert [d["data"]["version"] for _, d in got] == list(range(6, 11))


async def test_a_real_retention_trim_at_the_cursor_is_not_lag(
    rclient: redis.Redis, source: RedisSignalSource, pid: str, prefix: str
) -> None:
    """``MAXLEN ~`` retention (whole stream nodes): resuming from the signal just
    before the oldest retained one delivers everything retained, no ``lagged``;
    from the one before that, ``lagged``."""
    key = ProcessKeys(pid, prefix).signals
    w = Writer(rclient, pid, prefix, 16)
    seen: list[str] = []
    for _ in range(130):  # remember every signal id before retention drops it
        w.commit()
        seen.append(rclient.xrevrange(key, count=1)[0][0].decode())
    assert rclient.xlen(key) < 130  # retention trimmed whole stream nodes
    first = rclient.xrange(key, count=1)[0][0].decode()
    assert first in seen and first != seen[0]
    at = seen[seen.index(first) - 1]
    retained = rclient.xlen(key)
    got = await take_observe(source, pid, at, retained)
    assert all(isinstance(s, Signal) for s in got) and len(got) == retained
    assert got[0].id == first  # type: ignore[union-attr]
    assert got[-1].data["version"] == 130  # type: ignore[union-attr]
    before = seen[seen.index(first) - 2]
    lag = await take_observe(source, pid, before, 1)
    assert isinstance(lag[0], Lagged)


@pytest.mark.parametrize(("dropped", "lagged"), [(4, False), (5, False), (6, True)])
async def test_memory_source_resumes_after_an_exact_trim(dropped: int, lagged: bool) -> None:
    """In memory: retention 10, v1..(10+dropped): v1..dropped are gone; cursor v5."""
    mem = MemorySignals(retention=10)
    pid = "svit://test/mem-trim"
    mem.register(pid)
    sigs = [mem.add(pid, SignalKind.COMMITTED, {"version": v}) for v in range(1, 11 + dropped)]
    got = await take_observe(mem, pid, sigs[4].id, 10)
    if lagged:
        assert isinstance(got[0], Lagged)
    else:
        assert versions(got) == list(range(6, 11 + dropped))
