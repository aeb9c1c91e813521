"""The queued-inbox index (``<prefix>:{P}:queued``, ``store.list_queued``).

Real Redis (single server and Redis Cluster, through ``rclient``), one key
prefix per test. The key must exist exactly while the committed ``/inbox`` is
non-empty, whatever commit changed it, and leave with the process.
"""

from __future__ import annotations

import pytest
import redis

from svit_cluster.errors import InvalidInput
from svit_cluster.process import Process, prepare_inbox_ack, prepare_inbox_append
from svit_cluster.store import MAX_LIST_LIMIT, ProcessKeys, RedisBackend, StoreConfig, list_queued
from tests._commit_log import commit_write, new_log

pytestmark = pytest.mark.servers


def _append(backend: RedisBackend, proc: Process, message: str) -> None:
    t = prepare_inbox_append(proc, message)
    assert t is not None
    backend.commit(t)
    proc.commit(t)


def _ack(backend: RedisBackend, proc: Process) -> None:
    head = proc.inbox_head_hash()
    assert head is not None
    t = prepare_inbox_ack(proc, head)
    backend.commit(t)
    proc.commit(t)


def _queued(client: redis.Redis, prefix: str) -> list[str]:
    out: list[str] = []
    cursor = None
    while True:
        page = list_queued(client, prefix=prefix, limit=2, cursor=cursor)
        out.extend(page.process_ids)
        cursor = page.next_cursor
        if cursor is None:
            return sorted(set(out))


def test_the_queued_key_follows_the_committed_inbox(rclient: redis.Redis,
                                                     config: StoreConfig) -> None:
    pid = "svit://t/agent"
    key = ProcessKeys(pid, config.prefix).queued
    backend, proc = new_log(rclient, pid, 3, config)
    assert rclient.exists(key) == 0
    _append(backend, proc, "one")
    assert int(rclient.get(key)) == proc.version
    _append(backend, proc, "two")
    commit_write(backend, proc, 7)  # any other commit keeps it while the inbox is non-empty
    assert int(rclient.get(key)) == proc.version
    _ack(backend, proc)
    assert rclient.exists(key) == 1  # "two" is still queued
    _ack(backend, proc)
    assert rclient.exists(key) == 0
    _append(backend, proc, "three")
    assert rclient.exists(key) == 1
    backend.delete()
    assert rclient.exists(key) == 0


def test_a_process_created_with_a_queued_inbox_is_indexed(rclient: redis.Redis,
                                                          config: StoreConfig) -> None:
    parent = Process.create("svit://t/parent", memory={})
    t = prepare_inbox_append(parent, "queued before the copy")
    assert t is not None
    parent.commit(t)
    child = parent.fork("svit://t/child")  # a fork keeps the queued messages
    backend = RedisBackend(rclient, child.id, 3, config)
    backend.claim()
    backend.create(child)
    assert rclient.exists(ProcessKeys(child.id, config.prefix).queued) == 1


def test_list_queued_lists_exactly_the_processes_with_a_queued_inbox(
        rclient: redis.Redis, config: StoreConfig) -> None:
    procs = {}
    for pid in ("svit://t/a", "svit://t/b", "svit://u/c", "svit://u/d"):
        procs[pid] = new_log(rclient, pid, 3, config)
    for pid in ("svit://t/a", "svit://u/c", "svit://u/d"):
        _append(*procs[pid], "hi")
    _ack(*procs["svit://u/d"])
    assert _queued(rclient, config.prefix) == ["svit://t/a", "svit://u/c"]
    with pytest.raises(InvalidInput):
        list_queued(rclient, prefix=config.prefix, limit=MAX_LIST_LIMIT + 1)
