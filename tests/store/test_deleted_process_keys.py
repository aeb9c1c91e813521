"""What a deleted process leaves in etcd and Redis: in etcd nothing (its owner
record is released; tokens are etcd revisions, global and kept across
compaction, so no per-process counter has to stay); in Redis only the fence
key, the tombstone that keeps refusing an older owner.

Real etcd and redis-server (and Redis Cluster, via ``rclient``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from svit_cluster.local import EtcdServer
from svit_cluster.ownership import Owners, owners_prefix
from svit_cluster.process import Process
from svit_cluster.store import RedisBackend, StoreConfig
from tests.store._support import unique

pytestmark = pytest.mark.servers


async def test_deleted_processes_leave_no_etcd_key_and_tokens_rise_after_compaction(
        make_lease: Callable[..., Any], cluster: str, rclient: redis.Redis) -> None:
    lease = await make_lease()
    owners = Owners(lease, cluster=cluster, host="h1")
    config = StoreConfig(prefix=unique("deleted"))
    pids = [f"svit://t/{unique('gone')}" for _ in range(10)]
    tokens: dict[str, int] = {}
    for pid in pids:  # create, then delete as the owner does: store delete, then release
        ownership = await owners.acquire(pid)
        backend = RedisBackend(rclient, pid, ownership.token, config)
        backend.claim()
        backend.create(Process.create(pid))
        backend.delete()
        assert await owners.release(ownership)
        tokens[pid] = ownership.token
    client = lease.client
    listed = await client.get_prefix(owners_prefix(cluster))
    assert listed.count == 0
    left = {k.decode() for k in rclient.scan_iter(match=f"{config.prefix}:*")}
    assert left == {f"{config.prefix}:{{{pid}}}:fence" for pid in pids}  # tombstones only

    await client.compact(listed.header.revision, physical=True)  # drop the history
    again = await owners.acquire(pids[0])  # the same id, created again
    assert again.token > max(tokens.values())
    backend = RedisBackend(rclient, pids[0], again.token, config)
    assert backend.claim() == again.token  # above its tombstone
    backend.create(Process.create(pids[0]))
    await owners.release(again)


def test_the_local_etcd_compacts_its_history(tmp_path: Path) -> None:
    """Like the chart (``etcd.autoCompaction``): revisions of released owner
    records do not accumulate in a local cluster's etcd."""
    command = EtcdServer(tmp_path)._command("etcd")
    flags = dict(zip(command[1::2], command[2::2], strict=False))
    assert flags["--auto-compaction-mode"] == "periodic"
    assert flags["--auto-compaction-retention"] == "1h"
