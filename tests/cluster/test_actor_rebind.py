"""One worker, several bindings over time: a process actor passivated at its host's
budget serves the next process, and nothing of the first leaks into the second.

A real :class:`ProcessActor` (no Ray: Ray only transports the calls) on a real
Redis: bind to A and commit, unbind, bind to B; a request still routed to A's
token is refused before it runs (``route_moved``), B's state is B's own, the
idle check refuses to unbind while a request runs, a ``watch`` of A's binding
returns when it ends, and a process's own idle timeout is stored with it and
applied by its next owner.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import pytest
import redis

from svit_cluster.cluster import ClusterConfig, ProcessActor
from svit_cluster.cluster._results import CreateSpec, Read, Residency, Unbound
from svit_cluster.local import RedisServer
from svit_cluster.process import Script

pytestmark = pytest.mark.servers

_n = itertools.count(1)

COUNTER = """(define (main input)
  (let ((count (+ (read "/memory/count") (value-get input "/by"))))
    (do (write "/memory/count" count) (value-map "count" count))))"""


def _body(pid: str, version: int, rid: str) -> bytes:
    return json.dumps({"protocol": "svit-control@1", "client_id": "c", "request_id": rid,
                       "process_id": pid, "expected_version": version,
                       "command": {"operation": "activate", "script": "counter",
                                   "input": {"type": "map", "value": {
                                       "by": {"type": "integer", "value": 1}}}}}).encode()


def _actor(redis: RedisServer, monkeypatch: pytest.MonkeyPatch, left: list[Any],
           **cfg: Any) -> ProcessActor:
    config = ClusterConfig(cluster=f"rb{next(_n)}", redis_url=redis.url,
                           reasoner={"enabled": False}, direct_transport=False, **cfg)
    actor = ProcessActor(config, "h1", "", 0, "agent:h1")

    async def leave(reason: str, token: int) -> None:
        left.append((reason, token))

    monkeypatch.setattr(actor, "_leave", leave)
    return actor


async def test_a_reused_worker_serves_only_its_current_binding(
        redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    left: list[Any] = []
    actor = _actor(redis_server, monkeypatch, left)
    a, b = f"svit://t/rebind-a-{next(_n)}", f"svit://t/rebind-b-{next(_n)}"
    create = CreateSpec(memory={"count": 0}, scripts={"counter": Script(COUNTER)})
    first = (await actor.bind_start_serve(a, 10, create)).unwrap()
    assert isinstance(first.pid, int), first
    done = await actor.control(10, _body(a, 0, "r1"), "p")
    assert done.unwrap().response().outcome.status == "committed"
    watch = asyncio.ensure_future(actor.watch(10))
    await asyncio.sleep(0.05)
    assert not watch.done()  # A's binding lasts: the watch waits

    assert await actor.unbind(11) == Unbound(False, token=10)  # not A's token
    assert await actor.unbind(10) == Unbound(True)
    assert await asyncio.wait_for(watch, 1.0) is False  # A's watch ended with it
    assert (actor.process_id, actor.token) == ("", 0)

    second = (await actor.bind_start_serve(b, 12, create)).unwrap()
    assert second.version == 0, second
    assert actor.bindings == 2
    # A request still routed to A (token 10) is refused before anything runs
    stale = await actor.state(10, "/memory/count")
    assert stale.code == "unavailable" and stale.route_moved, stale
    assert (await actor.control(10, _body(a, 1, "r2"), "p")).route_moved
    # B's state is B's own
    mine = await actor.state(12, "/memory/count")
    assert mine.unwrap() == Read(0, 0)
    assert await actor.watch(10) is False  # an ended binding's watch answers at once
    assert left == []
    await actor.unbind(12)


async def test_a_busy_binding_is_not_ended_by_the_idle_check(
        redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    left: list[Any] = []
    actor = _actor(redis_server, monkeypatch, left)
    pid = f"svit://t/rebind-busy-{next(_n)}"
    await actor.bind_start_serve(pid, 5, CreateSpec(memory={"count": 0},
                                                    scripts={"counter": Script(COUNTER)}))
    gate = asyncio.Event()
    release = asyncio.get_running_loop()

    def slow() -> dict[str, Any]:
        asyncio.run_coroutine_threadsafe(gate.wait(), release).result(5)
        return {"ok": True}

    running = asyncio.ensure_future(actor._run(5, slow))
    await asyncio.sleep(0.05)
    usage = await actor.residency()
    assert usage.inflight == 1 and usage.token == 5
    assert await actor.unbind(5) == Unbound(False, busy=True)
    gate.set()
    assert (await running).unwrap() == {"ok": True}
    assert (await actor.residency()).idle_s < 1.0
    assert await actor.unbind(5) == Unbound(True)


async def test_a_process_keeps_its_own_idle_timeout_across_owners(
        redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Set through its owner, stored with the process (no new version), applied by
    the next owner (another worker, a higher token) and dropped with a delete."""
    left: list[Any] = []
    one = _actor(redis_server, monkeypatch, left, passivate_after_s=300.0)
    pid = f"svit://t/rebind-idle-{next(_n)}"
    await one.bind_start_serve(pid, 5, CreateSpec(memory={"count": 0},
                                                  scripts={"counter": Script(COUNTER)}))
    assert one.passivate_after_s == 300.0
    assert (await one.set_residency(5, 0.4)).unwrap() == Residency(0.4, False)
    await asyncio.sleep(0.8)
    assert left == [("passivated", 5)]  # the watchdog applied it at once
    assert (await one.state(5, "/")).route_moved

    two = _actor(redis_server, monkeypatch, left, passivate_after_s=300.0)
    started = (await two.bind_start_serve(pid, 9, None)).unwrap()
    assert started.version == 0  # no transition was committed for the setting
    assert two.passivate_after_s == 0.4
    fenced = await one.set_residency(5, 60.0)  # the old binding is over
    assert fenced.code == "unavailable"
    assert (await two.set_residency(9, None)).unwrap() == Residency(300.0, True)
    deleted = (await two.delete(9)).unwrap()
    assert deleted.version == 0, deleted
    client = redis.Redis.from_url(redis_server.url)
    try:
        keys = [k.decode() for k in client.keys(f"*{pid}*")]
    finally:
        client.close()
    assert not [k for k in keys if k.endswith(":residency")], keys
