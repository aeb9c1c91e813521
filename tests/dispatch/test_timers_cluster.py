"""Durable timers on a REAL local cluster: 3 hosts, 2 dispatcher worker processes,
a real webhook server.

One process arms 200 webhook intents with ``{"delay_ms": 8000}``; right after,
the host that owns it and the dispatcher worker holding its outbox stream are
SIGKILLed. Every timer still arrives, none before its due time, each under its
own idempotency key (the timer id), the latest within 20 s of its due time.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from svit_cluster.client import SvitClient
from svit_cluster.dispatch import DispatchKeys
from svit_cluster.local import LocalCluster
from svit_cluster.local._dispatchers import kill_dispatcher, start_dispatcher
from svit_cluster.local._status import cluster_status
from svit_cluster.store import connect
from tests._support import wait_for
from tests.dispatch._support import WebhookStub, webhook_cluster

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


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, stub: WebhookStub
            ) -> Iterator[LocalCluster]:
    yield from webhook_cluster(tmp_path_factory.mktemp("timers"), stub,
                               hosts=3, lease_ttl_s=3, dispatchers=2)


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
