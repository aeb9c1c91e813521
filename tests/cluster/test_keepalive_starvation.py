"""Keepalives never starve, on a real etcd and a real Redis.

Under load the host agent's event loop can be busy for seconds (actor starts,
many activations). The lease keepalive must not share that loop: here the
agent's loop is blocked outright for longer than the lease TTL, and the lease
must come out of it HELD, still the same lease (no LOST, no rejoin) and alive on
etcd. No Ray is needed: an agent that owns no process is etcd state only.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from svit_cluster.cluster._agent import HostAgent, hosts_prefix
from svit_cluster.cluster._config import ClusterConfig
from svit_cluster.cluster._results import Outcome
from svit_cluster.cluster._types import Activated, ServeStatus
from svit_cluster.local import EtcdServer, RedisServer
from svit_cluster.ownership import LeaseState, open_client

pytestmark = pytest.mark.servers

TTL_S = 3


async def test_lease_survives_a_blocked_agent_event_loop(
    etcd_server: EtcdServer, redis_server: RedisServer,
) -> None:
    config = ClusterConfig(cluster=f"ka-{uuid.uuid4().hex[:8]}",
                           etcd_endpoint=etcd_server.endpoint,
                           redis_url=redis_server.url,
                           lease_ttl_s=TTL_S)
    agent = HostAgent(config, "h0")
    agent.spare_target = 0  # no Ray actors
    await agent.start()
    lease = agent.lease
    assert lease is not None and lease.state is LeaseState.HELD
    client = open_client(etcd_server.endpoint)
    try:
        # Block the agent's event loop (a synchronous sleep in a coroutine) for
        # twice the TTL: nothing on this loop runs meanwhile.
        time.sleep(2 * TTL_S + 0.5)
        assert lease.state is LeaseState.HELD, lease.state
        await asyncio.sleep(0.6)  # let the rejoin loop look at it
        status = await agent.status()
        assert agent.lease is lease, "the agent dropped its lease and rejoined"
        assert status["incarnation"] == 1 and status["lease_state"] == "held"
        info = await client.get_lease_info(lease.lease_id)
        assert info.TTL > 0, "etcd let the lease expire"
        assert await client.get(hosts_prefix(config.cluster) + b"h0") is not None
        # The keepalive lag metric is exported and shows no starvation.
        text = await agent.metrics()
        assert "svit_lease_keepalive_lag_seconds_count" in text
        assert status["max_keepalive_lag_s"] < TTL_S / 2
    finally:
        await agent.shutdown("test")
        await client.close()


async def test_an_overloaded_agent_sheds_new_activations(
    etcd_server: EtcdServer, redis_server: RedisServer,
) -> None:
    """Beyond its bound of activations under way, the agent answers ``unavailable``
    at once (the gateway's 503 + Retry-After) instead of queueing them."""
    config = ClusterConfig(cluster=f"ov-{uuid.uuid4().hex[:8]}",
                           etcd_endpoint=etcd_server.endpoint,
                           redis_url=redis_server.url, lease_ttl_s=TTL_S)
    agent = HostAgent(config, "h0")
    agent.spare_target = 0
    agent.max_activations = 2
    await agent.start()
    gate = asyncio.Event()
    started: list[str] = []

    async def slow_activate(process_id: str, create: object) -> Outcome[Activated]:
        started.append(process_id)
        await gate.wait()  # stands in for a slow actor start
        return Outcome.ok(Activated(ServeStatus.SERVING, "h0", 1, "x"))

    agent._activate = slow_activate  # type: ignore[method-assign]
    try:
        busy = [asyncio.ensure_future(agent.activate(f"p{i}")) for i in range(2)]
        await asyncio.sleep(0.1)
        shed = await asyncio.wait_for(agent.activate("p2"), timeout=2)
        assert shed.code == "unavailable" and shed.error is not None
        assert shed.error.fields["overloaded"] is True
        assert started == ["p0", "p1"]
        gate.set()
        assert all(r.unwrap().status == "serving" for r in await asyncio.gather(*busy))
        ok = await asyncio.wait_for(agent.activate("p3"), timeout=2)
        assert ok.unwrap().status == "serving"
        status = await agent.status()
        assert status["shed_activations"] == 1 and status["inflight_activations"] == 0
        assert "svit_agent_shed_activations_total 1.0" in await agent.metrics()
        assert agent.lease is not None and agent.lease.state is LeaseState.HELD
    finally:
        gate.set()
        await agent.shutdown("test")


async def test_an_activation_gives_up_when_the_host_stops_being_able_to_serve(
    etcd_server: EtcdServer, redis_server: RedisServer,
) -> None:
    """A half-dead host (raylet stopped, agent running) cannot start an actor; its
    activation must give up as soon as the lease leaves HELD instead of waiting
    the 60 s actor-start deadline, so the gateway places the process elsewhere."""
    config = ClusterConfig(cluster=f"hd-{uuid.uuid4().hex[:8]}",
                           etcd_endpoint=etcd_server.endpoint,
                           redis_url=redis_server.url, lease_ttl_s=TTL_S)
    agent = HostAgent(config, "h0")
    agent.spare_target = 0
    await agent.start()
    hang = asyncio.Event()

    async def take_actor_that_never_starts(*_: object) -> tuple[str, object]:
        await hang.wait()  # stands in for actor creation on a stopped raylet
        raise AssertionError("unreachable")

    agent._take_actor = take_actor_that_never_starts  # type: ignore[method-assign]
    try:
        pending = asyncio.ensure_future(agent.activate("p0"))
        await asyncio.sleep(0.3)
        assert not pending.done()
        assert agent.lease is not None
        agent.lease.stop_keepalive()  # what the failed health check does
        started = time.monotonic()
        result = await asyncio.wait_for(pending, timeout=5)
        assert result.code == "unavailable", result
        assert time.monotonic() - started < 1.0
    finally:
        hang.set()
        await agent.shutdown("test")
