"""What a deleted process leaves in etcd and Redis: in etcd nothing (its owner
record is released; tokens are etcd revisions, global and kept across
compaction, so no per-process counter has to stay); in Redis only the fence
key, the tombstone that keeps refusing an older owner.

Real etcd and redis-server (and Redis Cluster, via ``rclient``).
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from svit_cluster.local import EtcdServer
from svit_cluster.local._servers import COMPACTION_RETENTION
from svit_cluster.ownership import Owners, owners_prefix
from svit_cluster.process import Process
from svit_cluster.store import RedisBackend, StoreConfig
from tests._support import unique

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
    """Like the chart (``etcd.autoCompaction``): the local etcd compacts its
    history periodically (default :data:`COMPACTION_RETENTION`), so revisions
    of released owner records do not accumulate. Filled past a short retention
    on a real etcd: an old revision becomes unreadable, the newest stays."""
    command = EtcdServer(tmp_path / "default")._command("etcd")
    flags = dict(zip(command[1::2], command[2::2], strict=False))
    assert flags["--auto-compaction-mode"] == "periodic"
    assert flags["--auto-compaction-retention"] == COMPACTION_RETENTION == "5m"

    server = EtcdServer(tmp_path / "short", die_with_parent=True, compaction_retention="1s")
    server.start()
    try:
        revisions = [_put(server.url, f"v{i}")["header"]["revision"] for i in range(20)]
        first = int(revisions[0])
        deadline = time.monotonic() + 15
        while _range(server.url, first).get("code") is None:  # still readable
            assert time.monotonic() < deadline, "no compaction within 15 s at retention 1s"
            _put(server.url, "tick")  # periodic compaction needs new revisions
            time.sleep(0.5)
        assert "compacted" in _range(server.url, first)["message"]
        assert _range(server.url, 0)["kvs"]  # the current value stays
    finally:
        server.stop()


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """etcd's JSON gateway; error answers come back as their JSON body."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return dict(json.loads(resp.read()))
    except urllib.error.HTTPError as exc:
        return dict(json.loads(exc.read()))


_KEY = base64.b64encode(b"/compaction-probe").decode()


def _put(base: str, value: str) -> dict[str, Any]:
    return _post(f"{base}/v3/kv/put",
                 {"key": _KEY, "value": base64.b64encode(value.encode()).decode()})


def _range(base: str, revision: int) -> dict[str, Any]:
    return _post(f"{base}/v3/kv/range", {"key": _KEY, "revision": revision})
