"""The dispatcher on a REAL local cluster (etcd, Redis, Ray head + 2 hosts, gateway,
2 dispatcher worker processes): kills, forced redelivery, host loss, dead letters.

One cluster for the whole module; the tests run in file order and share it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from click.testing import CliRunner

from svit_cluster.cli import cli
from svit_cluster.client import SvitClient
from svit_cluster.dispatch import (
    DeliveryState,
    DispatchKeys,
    IntentStatus,
    delivery_status,
    destination_records,
)
from svit_cluster.errors import SvitError
from svit_cluster.local import ClusterSpec, LocalCluster
from svit_cluster.local._dispatchers import kill_dispatcher, start_dispatcher
from svit_cluster.local._status import cluster_status
from tests._support import wait_for
from tests.dispatch._support import SEND, SEND_TWO, WebhookStub, inbox_appends, new_pid

pytestmark = [pytest.mark.cluster, pytest.mark.servers]
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, stub: WebhookStub
            ) -> Iterator[LocalCluster]:
    state: Path = tmp_path_factory.mktemp("dc")
    lc = LocalCluster.up(ClusterSpec(
        state_dir=state, hosts=2, lease_ttl_s=3, snapshot_every=10_000, passivate_after_s=120,
        dispatchers=2,
        dispatch_options={
            "webhook_hosts": [f"127.0.0.1:{stub.port}"], "max_attempts": 10,
            "retry_initial_s": 0.05, "retry_max_s": 2.0, "claim_idle_s": 2.0,
            "claim_ttl_s": 2.5, "heartbeat_interval_s": 0.5, "worker_ttl_s": 2.0,
            "scan_interval_s": 0.5, "sink_timeout_s": 4.0,
            # These tests prove "nothing lost, each recorded once, in commit
            # order" by listing every intent of the outbox streams
            # (delivery_status), so acknowledged entries must stay listed.
            # Trimming itself is proven by tests/dispatch/test_trim.py (the
            # real worker on real Redis and Redis Cluster).
            "trim_acked": False,
        }))
    try:
        yield lc
    finally:
        lc.down()


def commit(admin: SvitClient, pid: str, inp: dict[str, Any]) -> None:
    """Commit one activation, retrying through failover (a retry may commit again)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            resp = admin.activate_until_committed(pid, "send", inp)
            assert resp.outcome.status == "committed", resp.outcome
            return
        except SvitError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def settled(rc: redis.Redis, senders: list[str]) -> dict[str, IntentStatus] | None:
    status = delivery_status(rc, senders)
    if status and all(s.state != DeliveryState.PENDING for s in status.values()):
        return status
    return None


def first_seen(keys: list[str | None]) -> list[str]:
    seen: list[str] = []
    for k in keys:
        if k is not None and k not in seen:
            seen.append(k)
    return seen


def worker_name(cluster: LocalCluster, worker_id: str) -> str:
    for name, entry in cluster.doc["dispatch"]["workers"].items():
        if entry["worker_id"] == worker_id:
            return str(name)
    raise AssertionError(f"no worker {worker_id}")


STATE: dict[str, Any] = {}


def test_kill_a_worker_mid_batch_loses_nothing(cluster: LocalCluster, admin: SvitClient,
                                               rc: redis.Redis, stub: WebhookStub) -> None:
    dest, sender = new_pid("dst"), new_pid("snd")
    admin.create_process(dest, memory={})
    admin.create_process(sender, memory={"n": 0}, scripts={"send": SEND_TWO})
    stub.slow_s = 0.08
    hook = f"{stub.base}/slow"
    for i in range(30):
        commit(admin, sender, {"a": dest, "b": hook, "body": {"i": i}})
    commit(admin, sender, {"a": dest, "b": f"http://localhost:{stub.port}/slow", "body": "x"})
    stream = DispatchKeys().outbox(sender)
    mine = {k for k in stub.keys_for("/slow") if k and k.startswith(sender)}
    holder = wait_for(lambda: rc.get(DispatchKeys.claim(stream)), what="a claim holder")
    wait_for(lambda: len({k for k in stub.keys_for("/slow")
                          if k and k.startswith(sender)} - mine) >= 5, what="5 deliveries")
    name = worker_name(cluster, holder.decode())
    assert kill_dispatcher(cluster, name) is not None  # SIGKILL, mid-batch
    killed_at = time.monotonic()
    status = wait_for(lambda: settled(rc, [sender]), timeout_s=60, what="every intent settled")
    took = time.monotonic() - killed_at
    start_dispatcher(cluster, name)  # back to two workers for the next tests

    hook_ids = sorted(i for i, s in status.items() if s.to == hook)
    svit_ids = sorted(i for i, s in status.items() if s.to == dest)
    assert len(hook_ids) == 30 and len(svit_ids) == 31
    bad = [s for s in status.values() if s.to.startswith("http://localhost")]
    assert len(bad) == 1 and bad[0].state == DeliveryState.DEAD_LETTERED
    assert bad[0].reason == "host_not_allowed"
    assert all(status[i].state == DeliveryState.DELIVERED for i in hook_ids + svit_ids)
    # The webhook: every allowed intent at least once, the key on every attempt,
    # only the allowed host, first deliveries in commit order.
    hits = [h for h in stub.hits_for("/slow") if h.key and h.key.startswith(sender)]
    assert {h.key for h in hits} == set(hook_ids)
    assert all(h.key == h.body["id"] and h.host == f"127.0.0.1:{stub.port}" for h in hits)
    by_version = sorted(hook_ids, key=lambda i: status[i].version)
    assert first_seen([h.key for h in hits]) == by_version
    # The Svit destination: each intent recorded exactly once, in commit order.
    record = destination_records(rc, dest)
    assert record.log_complete
    assert all(record.recorded_once(i) for i in svit_ids), record.appends
    assert inbox_appends(rc, dest) == sorted(svit_ids, key=lambda i: status[i].version)
    STATE.update(sender=sender, dest=dest, hook_ids=hook_ids, svit_ids=svit_ids,
                 takeover_s=took)


def test_forced_redelivery_stores_each_intent_once(cluster: LocalCluster, rc: redis.Redis,
                                                   stub: WebhookStub) -> None:
    sender, dest = STATE["sender"], STATE["dest"]
    stub.slow_s = 0.0
    before = len(stub.hits_for("/slow"))
    rc.xgroup_setid(DispatchKeys().outbox(sender), "svit-dispatch", "0")  # redeliver all
    wait_for(lambda: len(stub.hits_for("/slow")) - before >= 30, timeout_s=60,
             what="webhook redelivery")
    wait_for(lambda: settled(rc, [sender]), timeout_s=60, what="redelivery settled")
    hits = [h for h in stub.hits_for("/slow")[before:] if h.key and h.key.startswith(sender)]
    assert {h.key for h in hits} == set(STATE["hook_ids"])  # redelivered, same keys
    record = destination_records(rc, dest)
    assert all(record.recorded_once(i) for i in STATE["svit_ids"]), record.appends
    assert sorted(record.appends) == STATE["svit_ids"]


def test_dead_letters_via_cli_and_admin_api(cluster: LocalCluster, admin: SvitClient,
                                            rc: redis.Redis, stub: WebhookStub) -> None:
    sender = new_pid("dl")
    admin.create_process(sender, memory={"n": 0}, scripts={"send": SEND})
    stub.rejecting = True
    for i in range(3):
        commit(admin, sender, {"to": f"{stub.base}/reject", "body": i})
    status = wait_for(lambda: settled(rc, [sender]), timeout_s=60, what="dead letters")
    assert {s.state for s in status.values()} == {DeliveryState.DEAD_LETTERED}
    assert {s.reason for s in status.values()} == {"rejected"}
    state_dir = str(cluster.spec.state_dir)
    runner = CliRunner()
    out = runner.invoke(cli, ["dead-letters", "list", "--state-dir", state_dir])
    assert out.exit_code == 0, out.output
    assert all(i in out.output for i in status)
    url = cluster.doc["gateway"]["url"]
    r = httpx.get(url + "/v1/admin/dead-letters",
                  headers={"Authorization": f"Bearer {cluster.doc['tokens']['local']}"})
    assert r.status_code == 403
    stub.rejecting = False
    try:
        out = runner.invoke(cli, ["dead-letters", "redrive", "--all", "--state-dir", state_dir])
        assert out.exit_code == 0, out.output
        final = wait_for(lambda: (lambda s: s if all(
            x.state == DeliveryState.DELIVERED for x in s.values()) else None)(
            delivery_status(rc, [sender])), timeout_s=60, what="re-drive delivered")
    finally:
        stub.rejecting = True
    assert all(s.redriven for s in final.values())
    keys = stub.keys_for("/reject")
    assert all(keys.count(i) == 2 for i in status)  # refused once, delivered once, same key
    out = runner.invoke(cli, ["dispatcher", "status", "--state-dir", state_dir, sender])
    assert out.exit_code == 0 and "delivered=3" in out.output, out.output
    doc = httpx.get(url + "/v1/admin/dead-letters", headers={
        "Authorization": f"Bearer {cluster.doc['tokens']['admin']}"}).json()
    assert not [d for d in doc["dead_letters"] if d["source"] == sender]


def test_killing_the_owner_host_loses_no_intent(cluster: LocalCluster, admin: SvitClient,
                                                rc: redis.Redis) -> None:
    dest, sender = new_pid("hd"), new_pid("hs")
    admin.create_process(dest, memory={})
    admin.create_process(sender, memory={"n": 0}, scripts={"send": SEND})
    commit(admin, sender, {"to": dest, "body": -1})
    wait_for(lambda: settled(rc, [sender]), what="first delivery")
    victim = cluster_status(cluster)["owners"][dest]["host"]
    stop = threading.Event()
    errors: list[BaseException] = []

    def load() -> None:
        i = 0
        try:
            with SvitClient(cluster.doc["gateway"]["url"],
                            cluster.doc["tokens"]["admin"]) as c:
                while not stop.is_set():
                    commit(c, sender, {"to": dest, "body": i})
                    i += 1
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=load)
    thread.start()
    try:
        time.sleep(1.5)
        cluster.kill_host(victim)  # the destination's owner (maybe the sender's too)
        time.sleep(6.0)
    finally:
        stop.set()
        thread.join(90)
    assert not errors, errors
    status = wait_for(lambda: settled(rc, [sender]), timeout_s=90,
                      what="every intent delivered after the host kill")
    assert len(status) > 5
    assert {s.state for s in status.values()} == {DeliveryState.DELIVERED}, [
        s for s in status.values() if s.state != DeliveryState.DELIVERED]
    record = destination_records(rc, dest)
    assert all(record.recorded_once(i) for i in status), record.appends
    assert inbox_appends(rc, dest) == sorted(status, key=lambda i: status[i].version)
    print(json.dumps({"intents": len(status), "takeover_s": STATE.get("takeover_s")}))
