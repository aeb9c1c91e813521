"""Failover headroom (svit_cluster.cluster._headroom): each host keeps warm
spares for its share of the busiest peer's processes, within its floor and
ceiling; the agent publishes its count and target in its host record (real
etcd) and starts the spares it now lacks."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from svit_cluster.cluster import HostAgent
from svit_cluster.cluster._config import ClusterConfig
from svit_cluster.cluster._headroom import failover_spares
from svit_cluster.local import EtcdServer
from svit_cluster.ownership import host_key, open_client
from tests._support import unique


def test_spares_are_the_share_of_the_busiest_peer_within_floor_and_ceiling() -> None:
    def spares(records: dict[str, Any], floor: int = 2, ceiling: int = 4) -> int:
        return failover_spares("h1", records, warm_spares=floor, max_warm_spares=ceiling)

    # 6 processes on h2, two other live hosts: each keeps 3
    assert spares({"h1": {"active": 0}, "h2": {"active": 6}, "h3": {"active": 0}}) == 3
    # the busiest PEER counts, not this host
    assert spares({"h1": {"active": 40}, "h2": {"active": 1}, "h3": {}}) == 2
    # this host's own record may be missing (it is rejoining): it still counts as live
    assert spares({"h2": {"active": 6}, "h3": {"active": 0}}) == 3
    # two hosts: the survivor takes all of the peer's processes, up to the ceiling
    assert spares({"h2": {"active": 3}}) == 3
    assert spares({"h2": {"active": 30}}) == 4
    # alone, or a ceiling below the floor: the floor
    assert spares({}) == 2
    assert spares({"h2": {"active": 30}}, floor=2, ceiling=1) == 2
    assert spares({"h2": {"active": 30}}, floor=0, ceiling=0) == 0
    # a record without a count, or a bad one, counts as 0
    assert spares({"h2": {"active": "x"}, "h3": {"host": "h3"}}) == 2


@pytest.mark.servers
async def test_an_agent_sizes_its_spares_to_a_peers_processes_and_publishes_them(
        etcd_server: EtcdServer) -> None:
    cfg = ClusterConfig(cluster=unique("headroom"), etcd_endpoint=etcd_server.endpoint,
                        lease_ttl_s=3)
    agent = HostAgent(cfg, "h1")
    refills: list[int] = []
    # no Ray here: the refill is recorded, not run
    agent.pool.refill = lambda: refills.append(agent.pool.wanted())  # type: ignore[method-assign]
    client = open_client(etcd_server.endpoint)
    lease = None
    try:
        await agent.leases.join()
        lease = agent.lease
        assert await agent.headroom_round() == cfg.warm_spares  # alone: the floor
        assert refills == [cfg.warm_spares]
        peer = await client.lease(10)
        await client.put(host_key(cfg.cluster, "h2"),
                         json.dumps({"host": "h2", "active": 6}).encode(), lease=peer)
        await client.put(host_key(cfg.cluster, "h3"),
                         json.dumps({"host": "h3", "active": 0}).encode(), lease=peer)
        assert await agent.headroom_round() == 3
        assert agent.pool.target() == 3 and refills[-1] == 3
        got = await client.get(host_key(cfg.cluster, "h1"))
        record = json.loads(got.value)
        assert record["active"] == 0 and record["spares"] == 3 and record["host"] == "h1"
        # the peer's processes leave: back to the floor; the surplus spares are
        # trimmed after their linger time (WorkerPool.trim)
        await client.put(host_key(cfg.cluster, "h2"),
                         json.dumps({"host": "h2", "active": 1}).encode(), lease=peer)
        assert await agent.headroom_round() == cfg.warm_spares
        assert json.loads((await client.get(host_key(cfg.cluster, "h1"))).value)["spares"] \
            == cfg.warm_spares
        await peer.revoke()
    finally:
        agent.leases.stop_health()
        if lease is not None:
            await lease.revoke()
        await client.close()
        await asyncio.sleep(0)
