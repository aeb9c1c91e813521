"""Deleting a process from the commit log: fenced like a commit, no resurrection.

Real Redis (single server and Redis Cluster, through ``rclient``). The owner
with the highest token deletes; every key of the process goes except the fence,
which stays as the tombstone: an older owner's commit, create, receipt or
snapshot is refused afterwards, and a delete by an older owner is refused
before anything is removed. Negative control: with the fence key removed too
(what a naive ``DEL`` of every key would do), the stale owner's create
resurrects the process -- so the tombstone is what the safety rests on.
"""

from __future__ import annotations

import pytest
import redis

from svit_cluster.errors import ConflictError, FencedError, NotFound, SvitError
from svit_cluster.process import Process
from svit_cluster.store import ProcessKeys, RedisBackend, StoreConfig
from tests._commit_log import commit_write, new_log, receipt

pytestmark = pytest.mark.servers


def _keys_left(client: redis.Redis, keys: ProcessKeys) -> set[str]:
    return {k for k in keys.all() if client.exists(k)}


def test_the_owner_deletes_every_key_but_the_fence(
        rclient: redis.Redis, pid: str, config: StoreConfig) -> None:
    backend, proc = new_log(rclient, pid, 7, config)
    commit_write(backend, proc, 1, request_id="r1")
    commit_write(backend, proc, 2)
    keys = ProcessKeys(pid, config.prefix)
    rclient.xadd(keys.outbox, {"intent": "{}", "version": "2"})
    rclient.xadd(keys.signals, {"kind": "committed"})
    rclient.set(keys.session, "s1")
    rclient.xadd(keys.events("s1"), {"e": "1"}, id="1-0")
    assert len(_keys_left(rclient, keys)) >= 8
    result = backend.delete()
    assert result["version"] == 2 and result["removed_keys"] >= 8
    assert _keys_left(rclient, keys) == {keys.fence}
    assert int(rclient.get(keys.fence)) == 7
    assert not rclient.exists(keys.events("s1"))
    assert RedisBackend(rclient, pid, 8, config).restore() is None  # a new owner finds nothing
    with pytest.raises(NotFound):
        backend.delete()  # idempotent for the caller: the second answer is "not found"


def test_a_stale_owner_cannot_delete(rclient: redis.Redis, pid: str,
                                     config: StoreConfig) -> None:
    old, proc = new_log(rclient, pid, 3, config)
    commit_write(old, proc, 1)
    new = RedisBackend(rclient, pid, 9, config)
    new.claim()
    with pytest.raises(FencedError):
        old.delete()
    assert new.restore() is not None  # nothing was removed
    assert new.head() is not None and new.head().version == 1  # type: ignore[union-attr]


def _stale_writes(old: RedisBackend, proc: Process) -> list[SvitError | None]:
    results: list[SvitError | None] = []
    for write in (lambda: commit_write(old, proc, 99),
                  lambda: old.create(Process.create(old.process_id, memory={"zombie": 1})),
                  lambda: old.put_receipt(receipt("late"), version=1)):
        try:
            write()
            results.append(None)
        except SvitError as exc:
            results.append(exc)
    return results


def test_a_stale_owner_cannot_resurrect_a_deleted_process(
        rclient: redis.Redis, pid: str, config: StoreConfig) -> None:
    old, proc = new_log(rclient, pid, 4, config)
    commit_write(old, proc, 1)
    deleter = RedisBackend(rclient, pid, 10, config)
    deleter.claim()
    deleter.delete()
    results = _stale_writes(old, proc)
    assert all(isinstance(r, FencedError) for r in results), results
    keys = ProcessKeys(pid, config.prefix)
    assert _keys_left(rclient, keys) == {keys.fence}
    # A newer owner may create the id afresh.
    newer = RedisBackend(rclient, pid, 11, config)
    newer.claim()
    newer.create(Process.create(pid, memory={"fresh": True}))
    with pytest.raises(ConflictError):
        newer.create(Process.create(pid, memory={}))


def test_negative_control_without_the_tombstone_the_stale_owner_resurrects(
        rclient: redis.Redis, pid: str, config: StoreConfig) -> None:
    old, proc = new_log(rclient, pid, 4, config)
    commit_write(old, proc, 1)
    keys = ProcessKeys(pid, config.prefix)
    rclient.delete(*keys.all())  # a naive delete: the fence goes too
    results = _stale_writes(old, proc)
    assert results[1] is None  # the stale owner's create succeeded
    restored = RedisBackend(rclient, pid, 5, config).restore()
    assert restored is not None and restored.read("/memory/zombie") == 1
