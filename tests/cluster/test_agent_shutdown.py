"""HostAgent.shutdown (the SIGTERM path of `svit-cluster host-agent`), on a real etcd.

A host that is being stopped must give up its registration and lease at once,
so another host serves its processes without waiting for the lease TTL
No Ray is needed for a host that owns no process yet: the agent's
lease and host key are plain etcd state.
"""

from __future__ import annotations

import time
import uuid

import pytest

from svit_cluster.cluster._agent import HostAgent, hosts_prefix
from svit_cluster.cluster._config import ClusterConfig
from svit_cluster.cluster._results import ShutDown
from svit_cluster.local import EtcdServer
from svit_cluster.ownership import LeaseState, open_client

pytestmark = pytest.mark.servers


async def test_shutdown_revokes_the_lease_and_unregisters_at_once(
    etcd_server: EtcdServer,
) -> None:
    config = ClusterConfig(cluster=f"sd-{uuid.uuid4().hex[:8]}",
                           etcd_endpoint=etcd_server.endpoint, lease_ttl_s=30)
    agent = HostAgent(config, "h0")
    await agent._join()
    lease = agent.lease
    assert lease is not None and lease.state is LeaseState.HELD
    key = hosts_prefix(config.cluster) + b"h0"
    client = open_client(etcd_server.endpoint)
    try:
        assert await client.get(key) is not None
        started = time.monotonic()
        result = await agent.shutdown("test")
        assert result == ShutDown(released=0, revoked=True)
        # Gone now, not after the 30 s TTL.
        assert await client.get(key) is None
        assert time.monotonic() - started < 5
        info = await client.get_lease_info(lease.lease_id)
        assert info.TTL == -1  # etcd no longer knows the lease
        assert agent.lease is None and lease.state is LeaseState.LOST
        assert await agent.shutdown("again") == ShutDown(released=0, revoked=False)
    finally:
        await client.close()


async def test_an_agent_outside_ray_joins_without_starting_ray(etcd_server: EtcdServer) -> None:
    """An agent run in this process (no Ray worker) registers without an actor id
    and leaves Ray alone: ``ray.get_runtime_context()`` would start a local Ray
    instance here, which then stays this process's Ray connection -- a later
    ``ray.init(address=..., ignore_reinit_error=True)`` keeps talking to it,
    and ``ray.nodes()`` lists none of the real cluster's nodes."""
    import json

    import ray

    assert not ray.is_initialized(), "an earlier test left this process connected to Ray"
    config = ClusterConfig(cluster=f"nr-{uuid.uuid4().hex[:8]}",
                           etcd_endpoint=etcd_server.endpoint, lease_ttl_s=30)
    agent = HostAgent(config, "h0")
    await agent._join()
    client = open_client(etcd_server.endpoint)
    try:
        got = await client.get(hosts_prefix(config.cluster) + b"h0")
        assert got is not None
        assert json.loads(bytes(got.value))["actor_id"] is None
        assert not ray.is_initialized()
    finally:
        await agent.shutdown("test")
        await client.close()
