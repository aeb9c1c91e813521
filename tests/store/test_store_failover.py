"""Failover on the commit log: kill -9 of Redis, receipt replay, racing restored owners."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from svit_cluster.errors import ConflictError, FencedError, SvitError, UnavailableError
from svit_cluster.local import RedisServer
from svit_cluster.process import Process, Transaction
from svit_cluster.store import RedisBackend, StoreConfig, connect
from tests._commit_log import commit_write, new_log, receipt, seal_write

pytestmark = pytest.mark.servers


def test_kill9_of_redis_keeps_every_acknowledged_commit(
    fresh_redis: RedisServer, pid: str
) -> None:
    config = StoreConfig(prefix="kill9", snapshot_every=25, trim_margin=5)
    client = connect(fresh_redis.url, timeout_s=2)
    backend, proc = new_log(client, pid, 1, config)
    acked: list[tuple[int, str]] = []  # (version, event hash) the caller saw acknowledged
    failure: list[BaseException] = []
    started = threading.Event()

    def writer() -> None:
        i = 0
        while True:
            i += 1
            t = seal_write(proc, i)
            try:
                backend.commit(t, receipt(f"k{i}"))
            except SvitError as exc:
                failure.append(exc)
                return
            proc.commit(t)
            acked.append((t.record.process_version_after, t.record.event_hash))
            if i == 20:
                started.set()

    thread = threading.Thread(target=writer)
    thread.start()
    assert started.wait(10)
    time.sleep(0.2)
    fresh_redis.kill9()
    thread.join(10)
    assert isinstance(failure[0], UnavailableError)
    assert len(acked) > 20
    fresh_redis.restart()  # same port and data dir: Redis reloads its AOF

    survivor = RedisBackend(client, pid, 2, config)
    survivor.claim()
    restored = survivor.restore()  # verifies chain, +1 steps and root hashes
    assert restored is not None
    last_version, last_hash = acked[-1]
    # the in-flight commit may or may not have landed; nothing acknowledged is lost
    assert restored.version in (last_version, last_version + 1)
    stored = {e.version: Transaction.decode(e.record).event_hash for e in survivor.entries()}
    assert stored[last_version] == last_hash  # and the verified chain reaches back from it
    for version, event_hash in acked:
        assert stored.get(version, event_hash) == event_hash
    for i in range(len(acked) - 16, len(acked) + 1):
        assert survivor.get_receipt("tenant-a", "c1", f"k{i}") is not None
    client.close()


def test_retry_after_failover_replays_the_stored_receipt(
    fresh_redis: RedisServer, pid: str
) -> None:
    config = StoreConfig(prefix="replay")
    client = connect(fresh_redis.url)
    old, proc = new_log(client, pid, 1, config)
    response = b'{"outcome":{"status":"committed","previous_version":0},"replayed":false}'
    t = seal_write(proc, 1)
    old.commit(t, receipt("req-1", response))
    fresh_redis.kill9()  # the owner's host and Redis both go down
    fresh_redis.restart()

    new = RedisBackend(client, pid, 2, config)  # the next owner
    new.claim()
    restored = new.restore()
    assert restored is not None and restored.version == 1
    stored = new.get_receipt("tenant-a", "c1", "req-1")
    assert stored is not None and stored.response == response
    assert stored == receipt("req-1", response)
    with pytest.raises(FencedError):  # the old owner cannot commit the retry again
        old.commit(seal_write(proc, 1), receipt("req-1", response))
    assert client.xlen(new.keys.stream) == 1
    client.close()


def _two_restored_owners(rclient: redis.Redis, pid: str, config: StoreConfig,
                         tokens: tuple[int, int]) -> tuple[list[RedisBackend], list[Process]]:
    base, proc = new_log(rclient, pid, 1, config)
    for i in range(1, config.snapshot_every + 3):
        commit_write(base, proc, i)
    backends, procs = [], []
    for token in tokens:
        backend = RedisBackend(rclient, pid, token, config)
        backend.claim()
        restored = backend.restore()
        assert restored is not None
        backends.append(backend)
        procs.append(restored)
    assert procs[0].version == procs[1].version == proc.version
    return backends, procs


def _race(backends: list[RedisBackend], procs: list[Process]) -> list[BaseException | None]:
    barrier = threading.Barrier(2)
    results: list[BaseException | None] = [None, None]

    def run(i: int) -> None:
        t = seal_write(procs[i], f"owner-{i}")
        barrier.wait()
        try:
            backends[i].commit(t, receipt(f"race-{i}"))
        except SvitError as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return results


@pytest.mark.parametrize("tokens", [(2, 3), (2, 2)], ids=["newer-token", "same-token"])
def test_two_owners_restored_from_one_snapshot_commit_once(
    rclient: redis.Redis, pid: str, config: StoreConfig, tokens: tuple[int, int]
) -> None:
    backends, procs = _two_restored_owners(rclient, pid, config, tokens)
    version = procs[0].version + 1
    results = _race(backends, procs)
    winners = [i for i, r in enumerate(results) if r is None]
    assert len(winners) == 1
    loser = results[1 - winners[0]]
    if tokens[0] != tokens[1]:
        assert winners == [1] and isinstance(loser, FencedError)
    else:
        assert isinstance(loser, ConflictError)
    entries = [e for e in backends[0].entries() if e.version == version]
    assert len(entries) == 1 and entries[0].token == tokens[winners[0]]
    restored = RedisBackend(rclient, pid, 9, config).restore()
    assert restored is not None and restored.read("/memory/count") == f"owner-{winners[0]}"
