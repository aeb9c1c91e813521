"""Rehomer rules (pure logic; the cluster test is in test_failover_faults.py)."""

from __future__ import annotations

import asyncio
import time

import pytest

from svit_cluster.cluster._rehome import Rehomer
from svit_cluster.cluster._routes import Route
from svit_cluster.errors import NotFound, UnavailableError


def route(pid: str, host: str = "h1") -> Route:
    return Route(pid, host, 1, f"actor-{pid}")


class Places:
    def __init__(self, fail: dict[str, list[Exception]] | None = None) -> None:
        self.calls: list[tuple[str, float]] = []
        self.fail = fail or {}
        self.t0 = time.monotonic()

    async def __call__(self, pid: str) -> Route:
        self.calls.append((pid, time.monotonic() - self.t0))
        errors = self.fail.get(pid)
        if errors:
            raise errors.pop(0)
        return route(pid, "h2")


async def drain(r: Rehomer) -> None:
    assert r._task is not None
    await asyncio.wait_for(r._task, 30)


async def test_a_dead_host_is_acted_on_at_once_a_live_one_after_the_grace() -> None:
    places = Places()
    r = Rehomer(places, lambda host: host == "dead", grace_s=0.4)
    r.add(route("svit://t/a", "dead"))
    r.add(route("svit://t/b", "alive"))
    r.add(route("svit://t/a", "dead"))  # queued once
    await drain(r)
    at = dict(places.calls)
    assert len(places.calls) == 2 and r.restored == 2
    assert at["svit://t/a"] < 0.2 <= 0.35 <= at["svit://t/b"]


async def test_unavailable_is_retried_and_a_deleted_process_skipped() -> None:
    places = Places({"svit://t/busy": [UnavailableError("full"), UnavailableError("full")],
                     "svit://t/gone": [NotFound("no such process")]})
    r = Rehomer(places, lambda _h: True, grace_s=0)
    r.add(route("svit://t/busy"))
    r.add(route("svit://t/gone"))
    await drain(r)
    assert [p for p, _ in places.calls].count("svit://t/busy") == 3
    assert [p for p, _ in places.calls].count("svit://t/gone") == 1
    assert (r.restored, r.failed) == (1, 0)


async def test_at_most_max_pending_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    import svit_cluster.cluster._rehome as mod

    monkeypatch.setattr(mod, "MAX_PENDING", 2)
    r = Rehomer(Places(), lambda _h: False, grace_s=60)
    for i in range(4):
        r.add(route(f"svit://t/{i}"))
    assert r.dropped == 2
    await r.close()
