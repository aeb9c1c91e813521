"""Listing the stored processes a page at a time (``store.list_processes``).

Real Redis (single server and Redis Cluster, through ``rclient``), one key
prefix per test. Processes are created, committed and deleted through
``RedisBackend`` as owners do; the listing must find exactly the existing ones
of the asked tenant, with their head versions, across pages of any size.
"""

from __future__ import annotations

import pytest
import redis

from svit_cluster.errors import InvalidInput
from svit_cluster.store import (
    MAX_LIST_LIMIT,
    ListedProcess,
    ProcessKeys,
    StoreConfig,
    list_processes,
)
from tests._commit_log import commit_write, new_log

pytestmark = pytest.mark.servers


def _all(client: redis.Redis, prefix: str, tenant: str | None, limit: int
         ) -> tuple[list[ListedProcess], int]:
    """Follow the cursor to the end: (every listed process, pages read)."""
    out: list[ListedProcess] = []
    cursor, pages = None, 0
    while True:
        page = list_processes(client, prefix=prefix, tenant=tenant, limit=limit, cursor=cursor)
        pages += 1
        assert len(page.processes) <= limit + 8  # a SCAN step is not split, but stays small
        out.extend(page.processes)
        cursor = page.next_cursor
        if cursor is None:
            return out, pages
        assert pages < 10_000


def test_lists_exactly_the_existing_processes_of_a_tenant_with_versions(
        rclient: redis.Redis, config: StoreConfig) -> None:
    made = {}
    for pid in ("svit://t1/a", "svit://t1/b/c", "svit://t1", "svit://t1x/d", "svit://t2/e"):
        backend, proc = new_log(rclient, pid, 3, config)
        for n in range(len(made)):  # a different version per process
            commit_write(backend, proc, n)
        made[pid] = (backend, proc.version)
    made["svit://t1/b/c"][0].delete()
    rclient.set(f"{config.prefix}:{{svit://t1/junk}}:fence", "9")  # a tombstone: not listed

    listed, _ = _all(rclient, config.prefix, "t1", 100)
    assert sorted((p.process_id, p.version) for p in listed) == [
        ("svit://t1", 2), ("svit://t1/a", 0)]
    everyone, _ = _all(rclient, config.prefix, None, 100)
    assert sorted(p.process_id for p in everyone) == [
        "svit://t1", "svit://t1/a", "svit://t1x/d", "svit://t2/e"]
    assert {p.process_id: p.version for p in everyone}["svit://t2/e"] == 4


def test_small_pages_miss_nothing_and_repeat_nothing(
        rclient: redis.Redis, config: StoreConfig) -> None:
    pids = {f"svit://many/p{i:03d}" for i in range(60)}
    for pid in pids:
        new_log(rclient, pid, 1, config)
    for limit in (3, 1000):
        listed, pages = _all(rclient, config.prefix, "many", limit)
        ids = [p.process_id for p in listed]
        assert set(ids) == pids, limit
        assert len(ids) == len(pids), limit  # no rehash here: nothing listed twice
        if limit == 3:
            assert pages >= 10  # really paged


def test_a_tenant_with_glob_characters_matches_literally(
        rclient: redis.Redis, config: StoreConfig) -> None:
    for pid in ("svit://a*/x", "svit://ab/y", "svit://a?/z", "svit://[a]/w"):
        new_log(rclient, pid, 1, config)
    assert [p.process_id for p in _all(rclient, config.prefix, "a*", 10)[0]] == ["svit://a*/x"]
    assert [p.process_id for p in _all(rclient, config.prefix, "a?", 10)[0]] == ["svit://a?/z"]
    assert [p.process_id for p in _all(rclient, config.prefix, "[a]", 10)[0]] == [
        "svit://[a]/w"]


def test_bad_arguments_are_refused(rclient: redis.Redis, config: StoreConfig) -> None:
    for limit in (0, MAX_LIST_LIMIT + 1):
        with pytest.raises(InvalidInput):
            list_processes(rclient, prefix=config.prefix, limit=limit)
    for cursor in ("", "x", "0", "1:abc", "99:0", "\u00b2:0", "0:\u00b2", "0:" + "9" * 20):
        with pytest.raises(InvalidInput):
            list_processes(rclient, prefix=config.prefix, cursor=cursor)
    for tenant in ("", "a/b"):
        with pytest.raises(InvalidInput):
            list_processes(rclient, prefix=config.prefix, tenant=tenant)
    assert ProcessKeys("svit://t/x", config.prefix).head.endswith("}:head")
