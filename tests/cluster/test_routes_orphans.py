"""The route cache tells an owner that died from one that released (real etcd).

When a host's lease expires or is revoked, etcd deletes its registration and
every owner record under the lease in one revision; a passivation deletes one
record. Only the first kind is reported to ``RouteCache.on_orphaned`` (the
router restores those processes elsewhere, so an agent's queued message gets
its turn without a new request).
"""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from svit_cluster.cluster._routes import Route, RouteCache
from svit_cluster.local import EtcdServer
from svit_cluster.ownership import host_key, open_client, owner_key

pytestmark = pytest.mark.servers


async def _until(cond: object, timeout_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not cond():  # type: ignore[operator]
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.02)


async def test_only_records_that_go_with_their_hosts_lease_are_orphaned(
        etcd_server: EtcdServer) -> None:
    cluster = f"c{uuid.uuid4().hex[:8]}"
    client = open_client(etcd_server.endpoint)
    cache = RouteCache(client, cluster)
    orphaned: list[Route] = []
    cache.on_orphaned = orphaned.append
    cache.start()
    try:
        await asyncio.wait_for(cache.ready.wait(), 5)
        leases = {h: await client.lease(30) for h in ("h1", "h2")}
        for host, lease in leases.items():
            await client.put(host_key(cluster, host), json.dumps({"host": host}).encode(),
                             lease=lease)
        owners = {"svit://t/a": "h1", "svit://t/b": "h1", "svit://t/c": "h1",
                  "svit://t/d": "h2"}
        for pid, host in owners.items():
            await client.put(owner_key(cluster, pid),
                             json.dumps({"host": host, "address": f"actor-{pid[-1]}"}).encode(),
                             lease=leases[host])
        await _until(lambda: len(cache.routes) == 4 and len(cache.hosts) == 2)

        # a passivation: one record deleted, its host stays
        await client.delete(owner_key(cluster, "svit://t/c"))
        await _until(lambda: "svit://t/c" not in cache.routes)
        # h1's lease revoked: its registration and its records go in one revision
        await leases["h1"].revoke()
        await _until(lambda: "h1" not in cache.hosts and "svit://t/a" not in cache.routes)
        await asyncio.sleep(0.2)
        assert sorted(r.process_id for r in orphaned) == ["svit://t/a", "svit://t/b"]
        assert {r.host for r in orphaned} == {"h1"}
        assert cache.routes.keys() == {"svit://t/d"}
    finally:
        await cache.close()
        await client.close()
