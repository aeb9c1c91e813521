"""Durable timers on the dispatcher: park, fire not before due, cancel, takeover, fencing.

Outbox entries are written directly with ``XADD`` in the shape the commit
script writes (field ``intent`` = canonical JSON, field ``version``): a delayed
intent carries ``delay_ms`` and ``due_ms`` (ms since the epoch, here taken
from Redis ``TIME``), a cancel entry ``{"message_id", "cancel"}``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from typing import Any

import pytest

from svit_cluster.dispatch import (
    CancelOutcome,
    DeliveryState,
    DispatchKeys,
    cancel_timer,
    delivery_status,
    list_timers,
    outbox_summary,
    timer_log,
)
from svit_cluster.dispatch._keys import DEFAULT_GROUP
from svit_cluster.dispatch._redisutil import async_client
from svit_cluster.dispatch._timers import TimerScripts, timer_keys
from svit_cluster.local import RedisServer
from svit_cluster.process import canonical_json
from svit_cluster.store import ProcessKeys, connect
from tests._support import wait_for
from tests.dispatch._support import WebhookStub

pytestmark = pytest.mark.servers


def pid() -> str:
    return f"svit://t/{uuid.uuid4().hex[:10]}"


def redis_ms(client: Any) -> int:
    """Now in ms: every server here runs on this machine's clock (a cluster
    client's ``TIME`` answers per node)."""
    del client
    return int(time.time() * 1000)


class Outbox:
    """Writes one process's outbox entries as the commit script does."""

    def __init__(self, client: Any, prefix: str, process: str | None = None) -> None:
        self.client = client
        self.pid = process or pid()
        self.key = DispatchKeys(prefix).outbox(self.pid)
        self.prefix = prefix
        self.version = 0

    def _add(self, doc: dict[str, Any]) -> None:
        self.client.xadd(self.key, {"intent": canonical_json(doc),
                                    "version": str(self.version)})

    def send(self, to: str, body: Any = None) -> str:
        self.version += 1
        mid = f"{self.pid}:{self.version}:0"
        self._add({"message_id": mid, "to": to, "body": body})
        return mid

    def arm(self, to: str, delay_ms: int, body: Any = None, *, due_ms: int | None = None
            ) -> tuple[str, int]:
        """A delayed intent; returns (timer id, due_ms)."""
        self.version += 1
        mid = f"{self.pid}:{self.version}:0"
        due = due_ms if due_ms is not None else redis_ms(self.client) + delay_ms
        self._add({"message_id": mid, "to": to, "body": body, "delay_ms": delay_ms,
                   "due_ms": due})
        return mid, due

    def cancel(self, timer_id: str) -> str:
        self.version += 1
        mid = f"{self.pid}:{self.version}:0"
        self._add({"message_id": mid, "cancel": timer_id})
        return mid


def events(client: Any, prefix: str, process: str) -> dict[str, list[str]]:
    """timer id -> its logged events, in order."""
    out: dict[str, list[str]] = {}
    for e in timer_log(client, prefix, process):
        out.setdefault(e["id"], []).append(e["event"])
    return out


def sample(worker: Any, name: str, labels: dict[str, str] | None = None) -> float:
    for metric in worker.worker.metrics.registry.collect():
        for s in metric.samples:
            if s.name == name and (labels is None or s.labels == labels):
                return float(s.value)
    return 0.0


# -- firing --------------------------------------------------------------------------


def test_a_timer_is_not_delivered_before_due_then_once_with_its_id_as_key(
        rclient: Any, prefix: str, make_worker: Any, stub: WebhookStub) -> None:
    box = Outbox(rclient, prefix)
    path = f"/ok/{uuid.uuid4().hex[:8]}"
    tid, due = box.arm(stub.base + path, 1500, {"x": 1})
    worker = make_worker()
    wait_for(lambda: list_timers(rclient, prefix, box.pid).timers, what="parked")
    page = list_timers(rclient, prefix, box.pid)
    assert [(t.id, t.due_ms, t.state, t.to) for t in page.timers] == [
        (tid, due, "pending", stub.base + path)]
    status = delivery_status(rclient, [box.pid], prefix=prefix)[tid]
    assert status.state == DeliveryState.PENDING and status.timer == "parked"
    assert status.due_ms == due
    assert stub.hits_for(path) == []
    hits = wait_for(lambda: stub.hits_for(path), what="the timer's delivery")
    assert hits[0].at * 1000 >= due  # Redis and the stub share this machine's clock
    time.sleep(0.5)
    assert [h.key for h in stub.hits_for(path)] == [tid]
    wait_for(lambda: events(rclient, prefix, box.pid).get(tid) == ["armed", "fired"],
             what="fired in the log")
    assert list_timers(rclient, prefix, box.pid).timers == []
    assert delivery_status(rclient, [box.pid], prefix=prefix)[tid].state \
        == DeliveryState.DELIVERED
    assert sample(worker, "svit_dispatch_timers_fired_total") == 1
    assert sample(worker, "svit_dispatch_timer_lateness_seconds_count") == 1


def test_a_later_intent_is_not_blocked_behind_an_earlier_long_timer(
        rclient: Any, prefix: str, make_worker: Any, stub: WebhookStub) -> None:
    box = Outbox(rclient, prefix)
    path = f"/ok/{uuid.uuid4().hex[:8]}"
    tid, _ = box.arm(stub.base + path, 3_600_000)
    later = box.send(stub.base + path, {"now": True})
    worker = make_worker()
    wait_for(lambda: stub.keys_for(path) == [later], what="the ordinary intent")
    assert [t.id for t in list_timers(rclient, prefix, box.pid).timers] == [tid]
    wait_for(lambda: sample(worker, "svit_dispatch_timers_pending") == 1,
             what="the pending gauge")
    summary = outbox_summary(rclient, [box.pid], prefix=prefix)[box.pid]
    assert (summary.pending, summary.delivered) == (1, 1)


def test_many_timers_due_at_once_are_each_delivered_once(
        rclient: Any, prefix: str, make_worker: Any, stub: WebhookStub) -> None:
    path = f"/ok/{uuid.uuid4().hex[:8]}"
    boxes = [Outbox(rclient, prefix) for _ in range(5)]
    due = redis_ms(rclient) + 1500
    ids = [box.arm(stub.base + path, 1500, due_ms=due)[0] for box in boxes for _ in range(60)]
    make_worker()
    make_worker()
    wait_for(lambda: len(set(stub.keys_for(path))) == len(ids), timeout_s=30,
             what="every timer")
    hits = stub.hits_for(path)
    assert min(h.at for h in hits) * 1000 >= due
    assert sorted({h.key for h in hits}) == sorted(ids)
    time.sleep(0.5)
    assert len(stub.hits_for(path)) == len(ids)  # the /ok stub never fails: no retries


# -- cancel --------------------------------------------------------------------------


def test_a_cancel_before_due_means_never_delivered(
        rclient: Any, prefix: str, make_worker: Any, stub: WebhookStub) -> None:
    box = Outbox(rclient, prefix)
    path = f"/ok/{uuid.uuid4().hex[:8]}"
    tid, _ = box.arm(stub.base + path, 1200)
    keep, _ = box.arm(stub.base + path, 1200)
    worker = make_worker()
    wait_for(lambda: len(list_timers(rclient, prefix, box.pid).timers) == 2, what="parked")
    box.cancel(tid)
    box.cancel(tid)  # a second cancel of the same timer
    wait_for(lambda: stub.keys_for(path) == [keep], what="the other timer")
    time.sleep(0.5)
    assert stub.keys_for(path) == [keep]
    assert events(rclient, prefix, box.pid)[tid] == ["armed", "cancelled",
                                                     "already_cancelled"]
    assert sample(worker, "svit_dispatch_timers_cancelled_total",
                  {"outcome": "cancelled"}) == 1
    status = delivery_status(rclient, [box.pid], prefix=prefix)
    assert status[tid].state == DeliveryState.CANCELLED
    summary = outbox_summary(rclient, [box.pid], prefix=prefix)[box.pid]
    assert (summary.pending, summary.cancelled) == (0, 1)
    # after firing, a cancel is too late; an unknown id is unknown
    assert cancel_timer(rclient, prefix, box.pid, keep) == CancelOutcome.TOO_LATE
    assert cancel_timer(rclient, prefix, box.pid, f"{box.pid}:99:0") == CancelOutcome.UNKNOWN


def test_cancel_racing_the_firing_gives_exactly_one_of_fired_or_cancelled(
        rclient: Any, prefix: str, make_worker: Any, stub: WebhookStub) -> None:
    """Many timers due at one moment, each cancelled from outside at that moment."""
    path = f"/ok/{uuid.uuid4().hex[:8]}"
    box = Outbox(rclient, prefix)
    n = 150
    due = redis_ms(rclient) + 6000
    ids = [box.arm(stub.base + path, 6000, due_ms=due)[0] for _ in range(n)]
    make_worker(batch_size=8)
    wait_for(lambda: len(list_timers(rclient, prefix, box.pid, limit=1000).timers) == n,
             what="parked")
    outcomes: dict[str, CancelOutcome] = {}
    while redis_ms(rclient) < due - 5:
        time.sleep(0.001)
    for tid in ids:
        outcomes[tid] = cancel_timer(rclient, prefix, box.pid, tid)
    counted = Counter(outcomes.values())
    assert counted[CancelOutcome.CANCELLED] and counted[CancelOutcome.TOO_LATE], counted
    fired = {t for t, o in outcomes.items() if o == CancelOutcome.TOO_LATE}
    wait_for(lambda: set(stub.keys_for(path)) == fired, what="the fired ones")
    time.sleep(0.5)
    assert Counter(stub.keys_for(path)) == Counter({t: 1 for t in fired})
    log = events(rclient, prefix, box.pid)
    for tid in ids:
        ev = log[tid]
        assert ("fired" in ev) != ("cancelled" in ev), (tid, ev)
        assert ("fired" in ev) == (tid in fired)


# -- takeover, fencing ---------------------------------------------------------------


def test_a_timer_taken_by_a_killed_worker_is_redelivered_with_the_same_key(
        rclient: Any, prefix: str, make_worker: Any, stub: WebhookStub,
        redis_target: Any) -> None:
    """A stale holder took the timer (it is in ``firing``) and died before done."""
    box = Outbox(rclient, prefix)
    path = f"/ok/{uuid.uuid4().hex[:8]}"
    tid, due = box.arm(stub.base + path, 300)
    keys = timer_keys(prefix, box.pid)
    claims_token = DispatchKeys.claim_token(box.key)
    # a first holder parks and takes it, then vanishes (its claim expires)
    rclient.xgroup_create(box.key, DEFAULT_GROUP, id="0", mkstream=True)

    async def first_holder() -> None:
        client = async_client(redis_target.url)
        try:
            token = int(await client.incr(claims_token))
            scripts = TimerScripts(client)
            reply: Any = await client.xreadgroup(DEFAULT_GROUP, "dead-worker", {box.key: ">"})
            eid, fields = reply[0][1][0]
            from svit_cluster.dispatch._intent import parse_entry
            intent = parse_entry(box.key, eid.decode(), fields, box.pid)
            assert (await scripts.park(keys, token, DEFAULT_GROUP, eid.decode(), intent))[0] \
                == "parked"
            while True:
                taken = await scripts.take(keys, token, 10)
                assert taken is not None
                if taken.timers:
                    return
                await asyncio.sleep(0.05)
        finally:
            await client.aclose()

    asyncio.run(first_holder())
    assert rclient.hexists(ProcessKeys(box.pid, prefix).timer_firing, tid)
    assert stub.keys_for(path) == []
    make_worker()
    wait_for(lambda: stub.keys_for(path) == [tid], what="the redelivery")
    assert stub.hits_for(path)[0].at * 1000 >= due
    wait_for(lambda: not rclient.hexists(ProcessKeys(box.pid, prefix).timer_firing, tid),
             what="done")
    assert events(rclient, prefix, box.pid)[tid] == ["armed", "fired"]


def test_a_worker_stopped_mid_delivery_leaves_the_timer_to_the_next_holder(
        rclient: Any, prefix: str, make_worker: Any, stub: WebhookStub) -> None:
    """The sink hangs; the worker stops (tasks cancelled) between take and done;
    a second worker takes over after the claim expiry and delivers it again,
    not before due, under the same key."""
    box = Outbox(rclient, prefix)
    tid, due = box.arm(stub.base + "/hang", 800)
    first = make_worker(sink_timeout_s=30.0, shutdown_grace_s=0.1)
    def attempts() -> list[str | None]:
        return [k for k in stub.keys_for("/hang") if k == tid]

    wait_for(lambda: attempts() == [tid], what="the first attempt")
    first.stop()
    assert rclient.hexists(ProcessKeys(box.pid, prefix).timer_firing, tid)
    old = stub.hang_s
    stub.hang_s = 0.0
    try:
        make_worker()
        wait_for(lambda: attempts() == [tid, tid], what="the redelivery")
        wait_for(lambda: events(rclient, prefix, box.pid).get(tid) == ["armed", "fired"],
                 what="fired once in the log")
    finally:
        stub.hang_s = old
    assert min(h.at for h in stub.hits_for("/hang") if h.key == tid) * 1000 >= due


def test_not_before_due_holds_after_a_takeover(
        rclient: Any, prefix: str, make_worker: Any, stub: WebhookStub) -> None:
    box = Outbox(rclient, prefix)
    path = f"/ok/{uuid.uuid4().hex[:8]}"
    tid, due = box.arm(stub.base + path, 4000)
    first = make_worker()
    wait_for(lambda: list_timers(rclient, prefix, box.pid).timers, what="parked")
    first.stop()
    make_worker()
    hits = wait_for(lambda: stub.hits_for(path), what="delivery after takeover")
    assert hits[0].at * 1000 >= due and [h.key for h in hits] == [tid]


def test_a_stale_holder_cannot_park_take_cancel_or_finish(rclient: Any, prefix: str,
                                                          redis_target: Any) -> None:
    box = Outbox(rclient, prefix)
    tid, _ = box.arm("https://hooks.example.org/x", 0)
    other, _ = box.arm("https://hooks.example.org/x", 0)
    keys = timer_keys(prefix, box.pid)
    token_key = DispatchKeys.claim_token(box.key)
    rclient.xgroup_create(box.key, DEFAULT_GROUP, id="0")
    pk = ProcessKeys(box.pid, prefix)

    async def go() -> None:
        from svit_cluster.dispatch._intent import parse_entry
        client = async_client(redis_target.url)
        try:
            scripts = TimerScripts(client)
            stale = int(await client.incr(token_key))
            reply: Any = await client.xreadgroup(DEFAULT_GROUP, "w", {box.key: ">"})
            (e1, f1), (e2, f2) = reply[0][1]
            i1 = parse_entry(box.key, e1.decode(), f1, box.pid)
            i2 = parse_entry(box.key, e2.decode(), f2, box.pid)
            assert (await scripts.park(keys, stale, DEFAULT_GROUP, e1.decode(), i1))[0] \
                == "parked"
            fresh = int(await client.incr(token_key))  # a newer holder claimed
            assert (await scripts.park(keys, stale, DEFAULT_GROUP, e2.decode(), i2))[0] \
                == "fenced"
            assert await scripts.take(keys, stale, 10) is None
            assert (await scripts.cancel(keys, stale, DEFAULT_GROUP, "", tid))[0] == "fenced"
            assert await rclient_async_zcard(client, pk.timers) == 1
            taken = await scripts.take(keys, fresh, 10)
            assert taken is not None and [t for t, _ in taken.timers] == [tid]
            assert await scripts.done(keys, stale, tid, "fired", e1.decode(), "", 0) \
                == "fenced"
            assert await client.hexists(pk.timer_firing, tid)
            assert await scripts.done(keys, fresh, tid, "fired", e1.decode(), "", 0) == "ok"
            assert await scripts.done(keys, fresh, tid, "fired", e1.decode(), "", 0) \
                == "settled"
        finally:
            await client.aclose()

    asyncio.run(go())
    assert other not in {e["id"] for e in timer_log(rclient, prefix, box.pid)}


async def rclient_async_zcard(client: Any, key: str) -> int:
    return int(await client.zcard(key))


# -- the index is not a scan ---------------------------------------------------------


def test_an_idle_runners_redis_commands_do_not_grow_with_pending_timers(
        tmp_path: Any, prefix: str, stub: WebhookStub) -> None:
    """Far-future timers: commands per second of an idle worker with 10 and
    with 3 000 pending timers are the same (a private server: exact counts)."""
    from svit_cluster.dispatch import DispatchConfig
    from tests.dispatch.conftest import WorkerThread

    server = RedisServer(tmp_path, die_with_parent=True)
    server.start()
    client = connect(server.url, timeout_s=5)
    started: list[WorkerThread] = []
    try:
        def rate(n: int) -> tuple[float, int]:
            box = Outbox(client, f"{prefix}n{n}")
            pipe = client.pipeline(transaction=False)
            now = redis_ms(client)
            for i in range(n):
                mid = f"{box.pid}:{i + 1}:0"
                pipe.xadd(box.key, {"intent": canonical_json(
                    {"message_id": mid, "to": stub.base + "/ok", "body": None,
                     "delay_ms": 3_600_000, "due_ms": now + 3_600_000 + i}),
                    "version": str(i + 1)})
            pipe.execute()
            worker = WorkerThread(DispatchConfig.from_mapping({
                "redis_url": server.url, "prefix": box.prefix, "worker_id": f"w{n}",
                "scan_interval_s": 0.5, "heartbeat_interval_s": 0.5, "poll_interval_s": 0.1,
                "claim_ttl_s": 2.0, "worker_ttl_s": 2.0, "batch_size": 256})).start()
            started.append(worker)
            wait_for(lambda: client.zcard(ProcessKeys(box.pid, box.prefix).timers) == n,
                     timeout_s=60, what="parked")
            time.sleep(1.0)
            info: Any = client.info("stats")
            before = int(info["total_commands_processed"])
            time.sleep(3.0)
            info = client.info("stats")
            per_s = (int(info["total_commands_processed"]) - before) / 3.0
            worker.stop()
            return per_s, int(sample(worker, "svit_dispatch_timers_fired_total"))

        small, fired_small = rate(10)
        large, fired_large = rate(3000)
        assert fired_small == fired_large == 0
        assert large <= small * 1.3 + 5, (small, large)
    finally:
        for w in started:
            w.stop()
        client.close()
        server.stop()


# -- deletion ------------------------------------------------------------------------


def test_deleting_the_process_removes_its_timers(rclient: Any, prefix: str,
                                                make_worker: Any, stub: WebhookStub) -> None:
    from svit_cluster.process import Process
    from svit_cluster.store import RedisBackend, StoreConfig

    p = pid()
    backend = RedisBackend(rclient, p, 1, StoreConfig(prefix=prefix))
    backend.claim()
    backend.create(Process.create(p))
    box = Outbox(rclient, prefix, p)
    path = f"/ok/{uuid.uuid4().hex[:8]}"
    box.arm(stub.base + path, 1500)
    fired, _ = box.arm(stub.base + path, 0)
    make_worker()
    wait_for(lambda: stub.keys_for(path) == [fired], what="the due one")
    wait_for(lambda: list_timers(rclient, prefix, p).timers, what="parked")
    backend.delete()
    pk = ProcessKeys(p, prefix)
    for key in (pk.timers, pk.timer_intents, pk.timer_firing, pk.timer_done, pk.timer_log):
        assert not rclient.exists(key), key
    time.sleep(2.0)
    assert stub.keys_for(path) == [fired]


def test_list_timers_pages_in_due_order(rclient: Any, prefix: str) -> None:
    box = Outbox(rclient, prefix)
    pk = ProcessKeys(box.pid, prefix)
    for i in range(25):
        tid = f"{box.pid}:{i + 1}:0"
        rclient.zadd(pk.timers, {tid: 1000 + i // 2})
        rclient.hset(pk.timer_intents, tid, canonical_json(
            {"to": "https://h/x", "due_ms": 1000 + i // 2, "version": i + 1,
             "intent": "{}", "entry_id": "1-0"}))
    seen: list[str] = []
    after = None
    while True:
        page = list_timers(rclient, prefix, box.pid, limit=7, after=after)
        assert len(page.timers) <= 7
        seen += [t.id for t in page.timers]
        if page.next_after is None:
            break
        after = page.next_after
    expected = [t.decode() for t in rclient.zrange(pk.timers, 0, -1)]
    assert seen == expected


def test_timer_outcomes_and_log_keep_their_bounds(rclient: Any, prefix: str) -> None:
    """More outcomes than ``TIMER_DONE_KEEP`` and events than ``TIMER_LOG_MAXLEN``:
    the newest are kept, the older ones go."""
    from svit_cluster.dispatch._timers import TIMER_DONE_KEEP, TIMER_LOG_MAXLEN

    box = Outbox(rclient, prefix)
    pk = ProcessKeys(box.pid, prefix)
    n = TIMER_DONE_KEEP + 200
    ids = [f"{box.pid}:{i + 1}:0" for i in range(n)]
    pipe = rclient.pipeline(transaction=False)
    for i, tid in enumerate(ids):  # as parked: the zset and the intents hash
        pipe.zadd(pk.timers, {tid: 10**13 + i})
        pipe.hset(pk.timer_intents, tid, "{}")
    pipe.execute()
    for tid in ids:
        assert cancel_timer(rclient, prefix, box.pid, tid) == CancelOutcome.CANCELLED
    assert rclient.zcard(pk.timers) == 0 and rclient.hlen(pk.timer_intents) == 0
    assert rclient.zcard(pk.timer_done) == TIMER_DONE_KEEP
    assert TIMER_LOG_MAXLEN <= rclient.xlen(pk.timer_log) <= TIMER_LOG_MAXLEN + 100
    # the newest outcome is kept, the oldest forgotten
    assert cancel_timer(rclient, prefix, box.pid, ids[-1]) == CancelOutcome.ALREADY_CANCELLED
    assert cancel_timer(rclient, prefix, box.pid, ids[0]) == CancelOutcome.UNKNOWN


def test_the_unsafe_ignore_cancels_switch_fires_a_timer_reported_cancelled(
        rclient: Any, prefix: str, make_worker: Any, stub: WebhookStub,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The chaos harness's negative control: with the test-only switch in the
    worker's environment, a committed cancel is answered ``cancelled`` and the
    timer still fires (without it, ``test_a_cancel_before_due_means_never_delivered``);
    the operator's ``cancel_timer`` is not affected."""
    from svit_cluster.dispatch.testing import UNSAFE_IGNORE_CANCELS_ENV

    monkeypatch.setenv(UNSAFE_IGNORE_CANCELS_ENV, "1")
    box = Outbox(rclient, prefix)
    path = f"/ok/{uuid.uuid4().hex[:8]}"
    tid, due = box.arm(stub.base + path, 1500)
    by_operator, _ = box.arm(stub.base + path, 1500)
    worker = make_worker()
    wait_for(lambda: len(list_timers(rclient, prefix, box.pid).timers) == 2, what="parked")
    box.cancel(tid)
    wait_for(lambda: events(rclient, prefix, box.pid).get(tid) == ["armed", "cancelled"],
             what="the cancel's outcome")
    assert cancel_timer(rclient, prefix, box.pid, by_operator) == CancelOutcome.CANCELLED
    hits = wait_for(lambda: stub.hits_for(path), what="the cancelled timer's delivery")
    assert [h.key for h in hits] == [tid]
    assert hits[0].at * 1000 >= due
    wait_for(lambda: events(rclient, prefix, box.pid).get(tid)
             == ["armed", "cancelled", "fired"], what="fired after cancelled")
    time.sleep(0.5)
    assert stub.keys_for(path) == [tid]  # the operator's cancel still removed its timer
    assert sample(worker, "svit_dispatch_timers_fired_total") == 1
