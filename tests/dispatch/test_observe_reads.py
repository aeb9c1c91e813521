"""The dispatcher's bounded observer reads: workers' heartbeats and one sender's
unacknowledged intents (what the gateway's console routes answer)."""

from __future__ import annotations

from typing import Any

import pytest

from svit_cluster.dispatch import (
    DispatchKeys,
    OutboxPage,
    WorkerHealth,
    undelivered,
    worker_health,
)
from svit_cluster.dispatch._keys import DEFAULT_GROUP
from svit_cluster.errors import InvalidInput
from tests.dispatch._support import Sender, new_pid

pytestmark = pytest.mark.servers


def test_worker_health_counts_live_and_expired_heartbeats_on_the_redis_clock(
        single_rclient: Any, prefix: str) -> None:
    assert worker_health(single_rclient, prefix=prefix) == WorkerHealth(0, 0, [])
    seconds, micros = single_rclient.time()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    key = DispatchKeys(prefix).workers
    single_rclient.zadd(key, {"w-live": now_ms + 30_000, "w-dead": now_ms - 5_000})
    health = worker_health(single_rclient, prefix=prefix)
    assert (health.live, health.expired) == (1, 1)
    assert [w["worker"] for w in health.workers] == ["w-live", "w-dead"]
    assert health.workers[0]["live"] and 25 < health.workers[0]["expires_in_s"] <= 30
    assert not health.workers[1]["live"] and health.workers[1]["expires_in_s"] < 0
    assert [w["worker"] for w in worker_health(single_rclient, prefix=prefix,
                                               limit=1).workers] == ["w-live"]
    with pytest.raises(InvalidInput):
        worker_health(single_rclient, prefix=prefix, limit=0)


def test_undelivered_lists_delivering_then_queued_intents_bounded(
        single_rclient: Any, prefix: str) -> None:
    pid = new_pid("observe")
    assert undelivered(single_rclient, pid, prefix=prefix) == OutboxPage(0, 0, False, [], False)
    sender = Sender(single_rclient, pid, prefix)
    ids = [sender.send(to="https://example.invalid/hook", body={"i": i})[0] for i in range(3)]
    page = undelivered(single_rclient, pid, prefix=prefix)
    assert (page.committed, page.retained, page.group, page.more) == (3, 3, False, False)
    assert [(i.id, i.state, i.deliveries) for i in page.intents] == [
        (iid, "queued", 0) for iid in ids]
    assert page.intents[0].to == "https://example.invalid/hook"
    assert [i.version for i in page.intents] == [1, 2, 3]

    # A worker reads the first two and acknowledges the first.
    stream = DispatchKeys(prefix).outbox(pid)
    single_rclient.xgroup_create(stream, DEFAULT_GROUP, id="0")
    read = single_rclient.xreadgroup(DEFAULT_GROUP, "w1", {stream: ">"}, count=2)
    first, _second = [eid for eid, _ in read[0][1]]
    single_rclient.xack(stream, DEFAULT_GROUP, first)
    page = undelivered(single_rclient, pid, prefix=prefix)
    assert page.group and not page.more
    assert [(i.id, i.state, i.deliveries) for i in page.intents] == [
        (ids[1], "delivering", 1), (ids[2], "queued", 0)]
    one = undelivered(single_rclient, pid, prefix=prefix, limit=1)
    assert [i.id for i in one.intents] == [ids[1]] and one.more
    with pytest.raises(InvalidInput):
        undelivered(single_rclient, pid, prefix=prefix, limit=201)
