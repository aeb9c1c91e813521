"""End-to-end behaviour on a real local cluster: racing, failover, receipts, passivation, auth."""

from __future__ import annotations

import threading
import time
import uuid

import httpx
import pytest

from svit_cluster.client import SvitClient, new_request_id
from svit_cluster.local import LocalCluster
from svit_cluster.local._status import cluster_status

pytestmark = pytest.mark.cluster

COUNTER = """(define (main input)
  (let ((count (+ (read "/memory/count") (value-get input "/by"))))
    (do (write "/memory/count" count) (value-map "count" count))))"""


def new_counter(client: SvitClient, tenant: str = "local") -> str:
    pid = f"svit://{tenant}/c-{uuid.uuid4().hex[:10]}"
    client.create_process(pid, memory={"count": 0}, scripts={"counter": COUNTER})
    return pid


def owner_of(cluster: LocalCluster, pid: str) -> dict:
    return cluster_status(cluster)["owners"][pid]


def test_racing_clients_give_one_commit_per_version(gateway: tuple[str, str]) -> None:
    url, token = gateway
    with SvitClient(url, token) as admin:
        pid = new_counter(admin)
    versions: list[int] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        with SvitClient(url, token, client_id=f"race-{n}") as c:
            for _ in range(15):
                resp = c.activate_until_committed(pid, "counter", {"by": 1},
                                                  observe_path="/memory/count")
                assert resp.outcome.status == "committed"
                with lock:
                    versions.append(resp.outcome.activation.version)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(versions) == list(range(1, 61))
    with SvitClient(url, token) as admin:
        assert admin.state(pid, "/memory/count") == (60, 60)


def test_auth_checks_through_the_real_gateway(cluster: LocalCluster,
                                              gateway: tuple[str, str]) -> None:
    url, admin_token = gateway
    tenant_token = cluster.doc["tokens"]["local"]
    with SvitClient(url, admin_token) as admin:
        other = new_counter(admin, tenant="other")
    body = {"protocol": "svit-control@1", "client_id": "c", "request_id": "r",
            "process_id": other, "expected_version": 0,
            "command": {"operation": "activate", "script": "counter",
                        "input": {"type": "map", "value": {"by": {"type": "integer",
                                                                  "value": 1}}}}}
    assert httpx.post(url + "/v1/control", json=body).status_code == 401
    r = httpx.post(url + "/v1/control", json=body,
                   headers={"Authorization": f"Bearer {tenant_token}"})
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "forbidden"
    big = b"{" + b" " * (cluster.spec.max_request_bytes + 10)
    r = httpx.post(url + "/v1/control", content=big,
                   headers={"Authorization": f"Bearer {tenant_token}",
                            "Content-Type": "application/json"})
    assert r.status_code == 413
    # The forbidden request left no receipt: the admin can use the same ids.
    r = httpx.post(url + "/v1/control", json=body,
                   headers={"Authorization": f"Bearer {admin_token}"})
    assert r.json()["outcome"]["status"] == "committed"


def test_unknown_process_is_not_found(gateway: tuple[str, str]) -> None:
    url, token = gateway
    r = httpx.get(url + "/v1/processes/state",
                  params={"process_id": "svit://local/does-not-exist", "path": "/"},
                  headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "not_found"


def test_passivation_then_reactivation_restores_the_same_root(
    cluster: LocalCluster, gateway: tuple[str, str]
) -> None:
    url, token = gateway
    with SvitClient(url, token) as admin:
        pid = new_counter(admin)
        for _ in range(25):  # crosses a snapshot (snapshot_every=20)
            admin.activate_until_committed(pid, "counter", {"by": 2})
        before = admin.snapshot(pid)["snapshot"]
        token_before = owner_of(cluster, pid)["token"]
        deadline = time.monotonic() + 30
        while pid in cluster_status(cluster)["owners"]:
            assert time.monotonic() < deadline, "actor never passivated"
            time.sleep(0.5)
        after = admin.snapshot(pid)["snapshot"]  # reactivates on demand
        assert after["root_hash"] == before["root_hash"]
        assert after["version"] == before["version"] == 25
        assert owner_of(cluster, pid)["token"] > token_before


def test_kill_owner_host_moves_process_and_retry_replays_receipt(
    cluster: LocalCluster, gateway: tuple[str, str]
) -> None:
    url, token = gateway
    with SvitClient(url, token, client_id="failover", attempts=80, max_wait_s=0.5) as c:
        pid = new_counter(c)
        rid = new_request_id()
        first = c.activate(pid, "counter", {"by": 5}, expected_version=0, request_id=rid)
        assert first.outcome.status == "committed"
        victim = owner_of(cluster, pid)["host"]
        killed_at = time.monotonic()
        cluster.kill_host(victim)
        try:
            # The acknowledged request, retried after the failover, replays its receipt.
            again = c.activate(pid, "counter", {"by": 5}, expected_version=0, request_id=rid)
            failover_s = time.monotonic() - killed_at
            assert again.replayed is True
            assert again.outcome == first.outcome
            nxt = c.activate(pid, "counter", {"by": 1}, expected_version=1)
            assert nxt.outcome.status == "committed"
            assert nxt.outcome.activation.version == 2
            new_owner = owner_of(cluster, pid)["host"]
            assert new_owner != victim
            assert c.state(pid, "/memory/count") == (6, 2)
            print(f"failover of {pid}: {victim} -> {new_owner} in {failover_s:.2f} s")
            assert failover_s < cluster.spec.lease_ttl_s + 10
        finally:
            cluster.restart_host(victim)
    assert cluster.wait_healthy(timeout_s=60)["hosts_live"] == 3
