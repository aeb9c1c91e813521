"""Durable timers on a REAL local cluster: 3 hosts, 2 dispatcher worker processes,
a real webhook server, and a simulated model whose every reasoning step takes
``STEP_S``. One cluster for the module; the tests run in file order and share it
(each test that kills a host or a worker restarts it, except the last).

* 200 webhook intents armed with ``{"delay_ms": 8000}``; right after, the host
  that owns the sender and the dispatcher worker holding its outbox stream are
  SIGKILLed. Every timer still arrives, none before its due time, each under its
  own idempotency key (the timer id), the latest within 20 s of its due time.
* A fired one-shot timer does not fire again after the same kills and restarts.
* A timer into a process inbox wakes a passivated process, once, not before due.
* A self-re-arming tick survives the SIGKILL of its owner host with exactly one
  tick per firing.
"""

from __future__ import annotations

import itertools
import json
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from svit_cluster.client import SvitClient
from svit_cluster.dispatch import DispatchKeys, timer_log
from svit_cluster.errors import SvitError
from svit_cluster.local import LocalCluster
from svit_cluster.local._dispatchers import kill_dispatcher, start_dispatcher
from svit_cluster.local._status import cluster_status
from svit_cluster.store import connect
from tests._support import wait_for
from tests.dispatch._support import WebhookStub, inbox_appends, new_pid, webhook_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.servers]
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

TIMERS = 200
PER_ACTIVATION = 100  # under max_messages (128): two activations arm all 200
DELAY_MS = 8000
ARM = """(define (arm to n i delay)
  (if (< i n)
      (do (send! to (value-map "i" i) (value-map "delay_ms" delay))
          (arm to n (+ i 1) delay))
      n))
(define (main input)
  (arm (value-get input "/to") (value-get input "/n") (value-get input "/from")
       (value-get input "/delay_ms")))"""

STEP_S = 0.8

ARM_ONE = """(define (main input)
  (send! (value-get input "/to") (value-get input "/body")
         (value-map "delay_ms" (value-get input "/delay_ms"))))"""

#: The documented tick pattern (docs/conformance.md D10, "Periodic ticks"): each
#: tick records which timer triggered it (the inbox head being answered) and the
#: one it armed, then re-arms itself; ``stop`` ends the chain.
TICK = """(define (main input)
  (if (read "/memory/stop") null
    (let ((n (+ 1 (read "/memory/n")))
          (parent (value-get (read "/inbox") "/0/id"))
          (armed (send! (read "/memory/self") "/exec tick"
                        (value-map "delay_ms" (read "/memory/period_ms")))))
      (do (write "/memory/n" n)
          (write "/memory/next" armed)
          (write (concat "/memory/ticks/" (json-stringify n))
                 (value-map "parent" parent "armed" armed))
          armed))))"""
STOP = """(define (main input)
  (do (write "/memory/stop" true)
      (cancel! (read "/memory/next"))))"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, stub: WebhookStub
            ) -> Iterator[LocalCluster]:
    # Every reasoning step of the simulated model takes STEP_S, so a turn that ran
    # ``exec`` is still open (its item not acknowledged) for STEP_S after the commit.
    yield from webhook_cluster(tmp_path_factory.mktemp("timers"), stub,
                               hosts=3, lease_ttl_s=3, dispatchers=2,
                               reasoner={"simulated_delay_s": STEP_S})


def _holder(rc: redis.Redis, cluster: LocalCluster, pid: str) -> str:
    """The name (in cluster.json) of the dispatcher worker holding ``pid``'s outbox."""
    worker_id = wait_for(lambda: rc.get(DispatchKeys.claim(DispatchKeys().outbox(pid))),
                         what="a claim holder").decode()
    for name, entry in cluster.doc["dispatch"]["workers"].items():
        if entry["worker_id"] == worker_id:
            return str(name)
    raise AssertionError(f"no worker {worker_id}")


def test_200_timers_fire_once_on_time_through_a_host_and_a_dispatcher_kill(
        cluster: LocalCluster, stub: WebhookStub) -> None:
    pid = f"svit://local/timers-{uuid.uuid4().hex[:8]}"
    to = f"{stub.base}/ok"
    with SvitClient(cluster.doc["gateway"]["url"], cluster.doc["tokens"]["admin"]) as admin:
        admin.create_process(pid, memory={}, scripts={"arm": ARM})
        started = time.time()
        for start in range(0, TIMERS, PER_ACTIVATION):
            resp = admin.activate_until_committed(pid, "arm", {
                "to": to, "from": start, "n": start + PER_ACTIVATION, "delay_ms": DELAY_MS})
            assert resp.outcome.activation.output == start + PER_ACTIVATION
        pending, _ = admin.state(pid, "/system/timers")
    due_ms = {t["id"]: t["due_ms"] for t in pending}  # type: ignore[index, union-attr]
    assert len(due_ms) == TIMERS and all(k.startswith(pid + ":") for k in due_ms)

    rc = connect(cluster.doc["redis"]["url"])
    try:
        worker = _holder(rc, cluster, pid)
    finally:
        rc.close()
    owner = cluster_status(cluster)["owners"][pid]["host"]
    cluster.kill_host(owner)
    assert kill_dispatcher(cluster, worker) is not None
    killed_at = time.time()
    assert killed_at * 1000 < min(due_ms.values()), "armed too slowly: no timer was due yet"

    def all_arrived() -> bool:
        return {k for k in stub.keys_for("/ok") if k in due_ms} == set(due_ms)

    wait_for(all_arrived, timeout_s=90, what=f"{TIMERS} timers fired")
    hits = [h for h in stub.hits_for("/ok") if h.key in due_ms]
    assert all(h.key == h.body["id"] for h in hits)  # one key per timer, on every attempt
    early = [(h.key, h.at * 1000 - due_ms[h.key]) for h in hits if h.at * 1000 < due_ms[h.key]]
    assert not early, early[:5]
    first: dict[str, float] = {}
    for h in hits:
        first[h.key] = min(first.get(h.key, h.at), h.at)  # type: ignore[index]
    lateness = sorted(first[k] - due_ms[k] / 1000 for k in due_ms)
    print(json.dumps({"timers": TIMERS, "hits": len(hits),
                      "armed_in_s": round(killed_at - started, 2),
                      "first_due_after_kills_s": round(min(due_ms.values()) / 1000 - killed_at, 2),
                      "duplicates": len(hits) - len(first),
                      "lateness_p50_s": round(lateness[len(lateness) // 2], 2),
                      "lateness_max_s": round(lateness[-1], 2)}))
    assert lateness[-1] <= 20.0, lateness[-5:]
    start_dispatcher(cluster, worker)  # back to two workers and three hosts
    cluster.restart_host(owner)


def test_a_fired_one_shot_timer_does_not_fire_again_after_restarts(
        cluster: LocalCluster, stub: WebhookStub) -> None:
    """The fault of Service Fabric's "single fire reminders firing multiple times"
    (microsoft/service-fabric-issues#178: a one-time reminder, handled, fired again
    once the actor's node restarted): here, once every timer was delivered, the
    sender's owner host and the dispatcher worker holding its stream are killed
    and restarted, and a new holder claims the stream; no timer fires again."""
    pid = f"svit://local/once-{uuid.uuid4().hex[:8]}"
    to = f"{stub.base}/ok"
    count = 20
    with SvitClient(cluster.doc["gateway"]["url"], cluster.doc["tokens"]["admin"]) as admin:
        admin.create_process(pid, memory={}, scripts={"arm": ARM})
        admin.activate_until_committed(pid, "arm",
                                       {"to": to, "from": 0, "n": count, "delay_ms": 1500})
        pending, _ = admin.state(pid, "/system/timers")
    ids = {t["id"] for t in pending}  # type: ignore[index, union-attr]
    assert len(ids) == count

    def hits() -> list[str]:
        return [k for k in stub.keys_for("/ok") if k in ids]  # type: ignore[misc]

    wait_for(lambda: set(hits()) == ids, timeout_s=60, what="every one-shot timer fired")
    time.sleep(1.0)  # let the dispatcher finish (its done script) before the kills
    before = len(hits())
    rc = connect(cluster.doc["redis"]["url"])
    try:
        worker = _holder(rc, cluster, pid)
        owner = cluster_status(cluster)["owners"][pid]["host"]
        cluster.kill_host(owner)
        assert kill_dispatcher(cluster, worker) is not None
        start_dispatcher(cluster, worker)
        cluster.restart_host(owner)
        claim = DispatchKeys.claim(DispatchKeys().outbox(pid))
        wait_for(lambda: rc.get(claim) is not None, timeout_s=60, what="a new claim holder")
        time.sleep(5.0)  # the new holder has loaded the timer keys and ticked
    finally:
        rc.close()
    assert len(hits()) == before, sorted(hits())  # nothing fired after the restarts


def owned(cluster: LocalCluster, pid: str) -> bool:
    return pid in cluster_status(cluster)["owners"]


def retrying(fn: Any, *args: Any, timeout_s: float = 60.0, **kwargs: Any) -> Any:
    """Call through a failover (only for reads and calls that are safe to repeat)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return fn(*args, **kwargs)
        except SvitError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def test_a_timer_wakes_a_passivated_process_once_and_not_before_due(
        cluster: LocalCluster, admin: SvitClient, rc: redis.Redis) -> None:
    sender, dest = new_pid("waker"), new_pid("sleeper")
    admin.create_process(sender, memory={}, scripts={"arm": ARM_ONE})
    admin.create_process(dest, memory={})
    admin.set_passivation(dest, 1.0)
    wait_for(lambda: not owned(cluster, dest), timeout_s=30, interval_s=0.3,
             what=f"{dest} passivated")

    resp = admin.activate_until_committed(sender, "arm", {"to": dest, "body": "wake up",
                                                          "delay_ms": 5000})
    tid = resp.outcome.activation.output
    pending, _ = admin.state(sender, "/system/timers")
    due_ms = {t["id"]: t["due_ms"] for t in pending}[tid]  # type: ignore[index, union-attr]

    time.sleep(max(0.0, (due_ms - 1500) / 1000 - time.time()))
    assert not owned(cluster, dest), "the destination was activated before its timer was due"
    last_absent = 0.0
    while not inbox_appends(rc, dest):
        last_absent = time.time()
        assert last_absent * 1000 < due_ms + 30_000, "the timer never arrived"
        time.sleep(0.02)
    # at the due time the inbox was still empty: the append happened after it
    assert last_absent * 1000 >= due_ms, (last_absent * 1000 - due_ms)
    assert inbox_appends(rc, dest) == [tid]

    # the reasoning loop of the woken process answers the item (echo) and acknowledges it
    wait_for(lambda: retrying(admin.state, dest, "/inbox")[0] == [], timeout_s=30,
             what="the woken process answered its inbox")
    # a second delivery under the same key (as after a dispatcher crash between the
    # sink's answer and its acknowledgement) is refused by the inbox's dedup, also
    # after the process passivated again
    wait_for(lambda: not owned(cluster, dest), timeout_s=30, interval_s=0.3,
             what=f"{dest} passivated again")
    again = admin.inbox(dest, {"id": tid, "from": sender, "body": "wake up",
                               "content": "wake up"}, dedup_key=tid)
    assert again["appended"] is False, again
    assert inbox_appends(rc, dest) == [tid]
    fired = [e for e in timer_log(rc, "svit", sender) if e["event"] == "fired"]
    assert [e["id"] for e in fired] == [tid]


PERIOD_MS = 1500
TICKS = 10


def test_a_self_rearming_tick_survives_a_host_kill_with_one_tick_per_firing(
        cluster: LocalCluster, admin: SvitClient, rc: redis.Redis) -> None:
    pid = new_pid("ticker")
    admin.create_process(pid, memory={"n": 0, "self": pid, "period_ms": PERIOD_MS,
                                      "ticks": {}, "stop": False, "next": None},
                         scripts={"tick": TICK, "stop": STOP})
    admin.activate_until_committed(pid, "tick", None)  # tick 1: arms the first timer

    def ticks() -> int:
        return int(retrying(admin.state, pid, "/memory/n")[0])  # type: ignore[arg-type]

    wait_for(lambda: ticks() >= 2, timeout_s=60, interval_s=0.2, what="2 ticks")
    owner = cluster_status(cluster)["owners"][pid]["host"]
    # kill the owner right after a tick's exec committed (it re-armed), while its
    # turn is still open: the new owner runs that turn again
    wait_for(lambda: ticks() >= 3, timeout_s=60, interval_s=0.02, what="3 ticks")
    cluster.kill_host(owner)
    wait_for(lambda: ticks() >= TICKS, timeout_s=120, interval_s=0.3, what=f"{TICKS} ticks")
    new_owner = cluster_status(cluster)["owners"][pid]["host"]
    assert new_owner != owner
    # stop: the flag ends the chain even when the pending timer fires first (the
    # cancel then loses the race: ``too_late``, and that tick does not re-arm)
    retrying(admin.activate_until_committed, pid, "stop", None)
    last = ticks()
    time.sleep(2 * PERIOD_MS / 1000 + 1.0)  # a second chain, if any, would tick meanwhile
    assert ticks() == last

    memory, _ = retrying(admin.state, pid, "/memory")
    rows: dict[str, dict[str, Any]] = memory["ticks"]  # type: ignore[index, assignment]
    chain = [rows[str(k)] for k in range(1, last + 1)]
    assert len(rows) == last
    assert chain[0]["parent"] is None
    for k in range(1, last):  # each tick was triggered by the timer the one before armed
        assert chain[k]["parent"] == chain[k - 1]["armed"], (k, chain[k - 1], chain[k])
    parents = [row["parent"] for row in chain[1:]]
    assert len(set(parents)) == len(parents)  # no firing ticked twice

    log = timer_log(rc, "svit", pid)
    armed = {e["id"]: int(e["due_ms"]) for e in log if e["event"] == "armed"}
    fired = [e["id"] for e in log if e["event"] == "fired"]
    ids = [row["armed"] for row in chain]
    assert sorted(armed) == sorted(ids)  # no timer was armed outside the chain
    outcome = {e["event"] for e in log if e["id"] == ids[-1]} - {"armed"}
    last_fired = outcome in ({"fired", "too_late"}, {"fired"})
    assert last_fired or outcome == {"cancelled"}, outcome
    delivered = ids if last_fired else ids[:-1]
    assert fired == delivered  # each fired once, in chain order
    assert inbox_appends(rc, pid) == delivered  # each firing reached the inbox once
    # the kill hit an open turn: its re-run found the committed exec by its request id
    # (``already_executed``, or a replayed receipt) and armed nothing
    tool_results = [json.loads(m["message"].get("content") or "{}")
                    for m in retrying(admin.recent_messages, pid, 256)
                    if m["message"].get("role") == "tool"]
    rerun = [r for r in tool_results
             if r.get("status") == "already_executed" or r.get("replayed") is True]
    assert len(rerun) == 1 and len(tool_results) == len(delivered) + 1, tool_results

    dues = [armed[i] for i in ids]
    gaps = [b - a for a, b in itertools.pairwise(dues)]
    assert min(gaps) >= PERIOD_MS, gaps  # ticks are never closer than the period
    print(json.dumps({"ticks": last, "killed_after_tick": 3, "rerun": rerun[0],
                      "period_ms": PERIOD_MS, "gap_min_ms": min(gaps),
                      "gap_max_ms": max(gaps),
                      "gap_p50_ms": sorted(gaps)[len(gaps) // 2]}))
