"""Which hosts a chaos run counts as warm (their spares up), read from the host
records in a real etcd: the runner starts a host fault only when every free
host that takes over is warm (svit_chaos.runner)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest
from svit_chaos.cluster import LocalClusterTarget
from svit_chaos.proxy import ProxyHub

from svit_cluster.local import EtcdServer
from svit_cluster.ownership import host_key, open_client
from tests._support import unique

pytestmark = pytest.mark.servers


def test_a_host_is_warm_when_its_record_says_so_and_its_spares_are_up(
        etcd_server: EtcdServer) -> None:
    cluster_name = unique("warm")
    records = {
        "h1": {"host": "h1", "warm": True, "spares": 3, "ready": 3},
        "h2": {"host": "h2", "warm": True, "spares": 3, "ready": 1},  # spares taken
        "h3": {"host": "h3", "warm": False},  # just joined
        "h4": {"host": "h4", "warm": True},  # an agent that states no counts
    }

    async def put() -> None:
        client = open_client(etcd_server.endpoint)
        try:
            for host, record in records.items():
                await client.put(host_key(cluster_name, host), json.dumps(record).encode())
        finally:
            await client.close()

    asyncio.run(put())
    cluster = SimpleNamespace(doc={"etcd": {"endpoint": etcd_server.endpoint},
                                   "cluster": cluster_name, "hosts": {}})
    target = LocalClusterTarget(cluster, ProxyHub(), 3.0)
    assert target.warm_hosts() == {"h1", "h4"}
    # etcd out of reach: no host counts as warm (the runner waits)
    cluster.doc["etcd"]["endpoint"] = "127.0.0.1:1"
    assert target.warm_hosts() == set()
