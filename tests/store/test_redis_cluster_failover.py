"""Durability across a Redis Cluster failover.

A real local Redis Cluster (3 masters x 1 replica, ``appendfsync always``,
``cluster-node-timeout`` 1 s) per test. The master of the process's slot is
SIGKILLed (by PID) and the cluster promotes its replica. Replication is
asynchronous, so without ``WAIT`` a write the master acknowledged can be missing
on the promoted replica: an acknowledged commit is lost, and a fence raise
(claim) is undone so the previous owner commits again. With
``StoreConfig.wait_replicas`` = 1 the store acknowledges a commit or a claim only
after a replica has it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from svit_cluster.errors import FencedError, SvitError, UnavailableError
from svit_cluster.local import RedisClusterServer
from svit_cluster.process import Process
from svit_cluster.store import ProcessKeys, RedisBackend, StoreConfig, connect
from svit_cluster.store._keys import receipt_field
from svit_cluster.store._redis import RedisClient
from tests._commit_log import commit_write, new_log, receipt, seal_write
from tests._support import unique

pytestmark = pytest.mark.servers

T = TypeVar("T")


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[RedisClusterServer]:
    """A dedicated Redis Cluster this test may SIGKILL nodes of."""
    server = RedisClusterServer(tmp_path / "rc", masters=3, replicas=1, node_timeout_ms=1000,
                                die_with_parent=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _retry(fn: Callable[[], T], timeout_s: float = 30.0) -> T:
    """``fn()``, retried while Redis answers ``unavailable`` (failover in progress)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return fn()
        except UnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _acked(fn: Callable[[], object]) -> bool:
    """True if ``fn`` was acknowledged; False if it answered ``unavailable`` because
    too few replicas acknowledged it (the outcome is then unknown)."""
    try:
        fn()
    except UnavailableError as exc:
        assert exc.fields["reason"] == "replication", exc
        assert exc.fields["outcome"] == "unknown"
        return False
    return True


def _fail_over(cluster: RedisClusterServer, key: str) -> None:
    """SIGKILL the master of ``key``'s slot, wait for the promotion, bring the
    killed node back (it rejoins as a replica) and wait until all is in sync."""
    old = cluster.kill_master_of(key)
    cluster.wait_for_failover(key, old)
    old.start()
    cluster.wait_healthy(60)


@pytest.mark.parametrize("wait_replicas", [1, 0], ids=["wait-on", "wait-off"])
def test_writes_the_replica_never_saw_are_acknowledged_only_without_wait(
    own_cluster: RedisClusterServer, wait_replicas: int
) -> None:
    """The replica is cut off from its master (SIGSTOP, then the master drops the
    replication link), owner A commits version 6 and owner B claims; then the
    master is SIGKILLed and the stale replica is promoted.

    WAIT on: neither write is acknowledged (``unavailable``, outcome unknown);
    after the promotion every acknowledged commit is there, B claims again and
    the stale owner A is fenced. WAIT off (negative control): both writes are
    acknowledged and both are lost: version 6 is gone and A commits after B's
    acknowledged claim.
    """
    config = StoreConfig(prefix=unique("wait"), snapshot_every=10**9,
                         wait_replicas=wait_replicas, wait_timeout_ms=300)
    client = connect(own_cluster.url, timeout_s=2, cluster=True)
    pid = f"svit://test/{unique('lag')}"
    owner_a, proc = new_log(client, pid, 1, config)
    for i in range(1, 6):
        commit_write(owner_a, proc, i)  # versions 1..5, acknowledged and replicated
    key = ProcessKeys(pid, config.prefix).fence
    master = own_cluster.master_of(key)
    [replica] = own_cluster.replicas_of(master)
    # make sure versions 1..5 reached the replica before it is cut off
    node = client.get_redis_connection(client.get_node_from_key(key))  # type: ignore[union-attr, no-untyped-call]
    assert node.execute_command("WAIT", 1, 5000) == 1
    replica.pause()
    try:
        node.execute_command("CLIENT", "KILL", "TYPE", "replica")
        t6 = seal_write(proc, 6)
        commit_acked = _acked(lambda: owner_a.commit(t6))
        owner_b = RedisBackend(client, pid, 2, config)
        claim_acked = _acked(owner_b.claim)
        master.kill9()
    finally:
        replica.resume()
    own_cluster.wait_for_failover(key, master)
    master.start()
    own_cluster.wait_healthy(60)

    head = _retry(owner_a.head)
    assert head is not None
    if wait_replicas:
        assert (commit_acked, claim_acked) == (False, False)
        assert head.version == 5  # nothing acknowledged is missing (6 never was acked)
        assert _retry(owner_b.claim) == 2  # B claims again, now replicated
        with pytest.raises(FencedError):
            owner_a.commit(seal_write(Process.restore(proc.snapshot()), 6))
        assert _retry(owner_b.restore) is not None
    else:
        # Negative control: both writes were acknowledged, and the promoted
        # replica has neither of them.
        assert (commit_acked, claim_acked) == (True, True)
        assert head.version == 5, "acknowledged version 6 survived (not lost)"
        assert owner_a.fence() == 1  # B's acknowledged claim is undone
        stale = RedisBackend(client, pid, 1, config).restore()
        assert stale is not None
        t6b = seal_write(stale, "stale")
        owner_a.commit(t6b)  # the stale owner commits after B's acknowledged claim
        assert owner_a.head() is not None
    client.close()


def _writer(backend: RedisBackend, proc: Process, acked: list[tuple[int, str]],
            stop: threading.Event, errors: list[BaseException]) -> None:
    """Commit host writes until ``stop``; on ``unavailable`` resync from the store
    (the outcome is unknown) and go on. Records every acknowledged commit."""
    current = proc
    i = 0
    stale = False  # after an unknown outcome: never commit before a resync succeeded
    while not stop.is_set():
        if stale:
            time.sleep(0.05)
            try:
                restored = backend.restore()
            except UnavailableError:
                continue  # still failing over: try the resync again, do not commit
            assert restored is not None
            current, stale = restored, False
        i += 1
        t = seal_write(current, i)
        try:
            backend.commit(t)
        except UnavailableError:
            stale = True
            continue
        except SvitError as exc:
            errors.append(exc)
            return
        current.commit(t)
        acked.append((t.record.process_version_after, t.record.event_hash))


def test_killing_the_master_under_load_loses_no_acknowledged_commit_with_wait(
    own_cluster: RedisClusterServer,
) -> None:
    config = StoreConfig(prefix=unique("load"), snapshot_every=10**9, wait_replicas=1,
                         wait_timeout_ms=500)
    client: RedisClient = connect(own_cluster.url, timeout_s=2, cluster=True)
    pid = f"svit://test/{unique('load')}"
    backend, proc = new_log(client, pid, 1, config)
    acked: list[tuple[int, str]] = []
    errors: list[BaseException] = []
    stop = threading.Event()
    thread = threading.Thread(target=_writer, args=(backend, proc, acked, stop, errors))
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while len(acked) < 30 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(acked) >= 30, errors
        before = len(acked)
        _fail_over(own_cluster, ProcessKeys(pid, config.prefix).fence)
        deadline = time.monotonic() + 30
        while len(acked) < before + 30 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(acked) >= before + 30, "commits did not resume after the promotion"
    finally:
        stop.set()
        thread.join(30)
    assert not errors, errors

    entries = {e.version: e for e in _retry(backend.entries)}
    restored = _retry(backend.restore)  # verifies the chain and root hashes
    assert restored is not None
    for version, _ in acked:
        assert version in entries, f"acknowledged version {version} lost"
    assert [v for v, _ in acked] == sorted(v for v, _ in acked)
    assert restored.version >= acked[-1][0]
    # the event hashes of acknowledged commits are the ones stored (no fork)
    by_version = dict(acked)
    for version, event_hash in by_version.items():
        assert event_hash.encode() in entries[version].record
    # a new owner claims on the promoted master; the old owner is fenced
    assert _retry(RedisBackend(client, pid, 2, config).claim) == 2
    with pytest.raises(FencedError):
        backend.commit(seal_write(restored, "stale"))
    client.close()


def test_a_receipt_is_replayed_only_once_its_commit_is_on_a_replica(
    own_cluster: RedisClusterServer,
) -> None:
    """A commit that no replica acknowledged answers ``unavailable``; its receipt
    is on the master. A retry of the same request must not replay that receipt
    as an acknowledgement until a replica has the commit."""
    config = StoreConfig(prefix=unique("rcpt"), snapshot_every=10**9, wait_replicas=1,
                         wait_timeout_ms=300)
    client = connect(own_cluster.url, timeout_s=2, cluster=True)
    pid = f"svit://test/{unique('rcpt')}"
    backend, proc = new_log(client, pid, 1, config)
    key = ProcessKeys(pid, config.prefix).fence
    master = own_cluster.master_of(key)
    [replica] = own_cluster.replicas_of(master)
    node = client.get_redis_connection(client.get_node_from_key(key))  # type: ignore[union-attr, no-untyped-call]
    replica.pause()
    try:
        node.execute_command("CLIENT", "KILL", "TYPE", "replica")
        assert not _acked(lambda: backend.commit(seal_write(proc, 1), receipt("r1")))
        assert node.hget(ProcessKeys(pid, config.prefix).receipts,
                         receipt_field("tenant-a", "c1", "r1")) is not None  # on the master
        with pytest.raises(UnavailableError) as refused:
            backend.get_receipt("tenant-a", "c1", "r1")  # the retry's replay lookup
        assert refused.value.fields["reason"] == "replication"
        assert refused.value.fields["outcome"] == "none"
    finally:
        replica.resume()
    # the replica reconnects and catches up: now the replay is safe and allowed
    found = _retry(lambda: backend.get_receipt("tenant-a", "c1", "r1"))
    assert found is not None and found.request_id == "r1"
    client.close()
