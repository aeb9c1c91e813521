"""Placement skips dead and unanswering hosts; a dead node's lease is revoked at once.

Ray-free: the node table is ``ray.nodes()``-shaped data,
the agents are fake call targets (pure placement logic); the lease revocation
runs against the real etcd of tests/conftest.py.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest

from svit_cluster.cluster import _placement
from svit_cluster.cluster._agent import hosts_prefix
from svit_cluster.cluster._config import ClusterConfig
from svit_cluster.cluster._placement import (
    HostWatch,
    NodeTable,
    pick_host,
    revoke_agentless_leases,
    revoke_dead_leases,
)
from svit_cluster.cluster._results import Outcome
from svit_cluster.cluster._router import RayRouter
from svit_cluster.cluster._types import Activated, ServeStatus
from svit_cluster.errors import UnavailableError
from svit_cluster.local import EtcdServer
from svit_cluster.ownership import open_client


def node(node_id: str, host: str | None, alive: bool) -> dict[str, Any]:
    resources = {"CPU": 1.0}
    if host is not None:
        resources[f"svit_host:{host}"] = 1.0
    return {"NodeID": node_id, "Alive": alive, "Resources": resources}


def test_node_table_a_host_is_dead_only_without_an_alive_node() -> None:
    table = NodeTable.parse([
        node("n-a", "a", True),
        node("n-b-old", "b", False), node("n-b-new", "b", True),  # b restarted
        node("n-c", "c", False),
        node("n-head", None, True),
    ])
    assert table.dead_hosts() == {"c"}
    assert table.dead_node_ids == {"n-b-old", "n-c"}
    assert table.alive_node_ids == {"n-a", "n-b-new", "n-head"}


def test_pick_host_least_loaded_not_excluded() -> None:
    load = {"a": 0, "b": 2, "c": 1}
    assert pick_host(load) == "a"
    assert pick_host(load, {"a"}) == "c"
    assert pick_host(load, {"a", "b", "c"}) is None


def test_pick_host_takes_equally_loaded_hosts_in_turn() -> None:
    """Hosts at the same load (all at their residency budget) share new
    placements instead of the first by name taking every one."""
    load = {"a": 8, "b": 8, "c": 8, "d": 9}
    assert [pick_host(load, turn=t) for t in range(4)] == ["a", "b", "c", "a"]
    assert [pick_host(load, {"a"}, turn=t) for t in range(2)] == ["b", "c"]
    assert pick_host({"a": 1, "b": 2}, turn=5) == "a"  # no tie: the least loaded


def test_host_watch_suspect_expires_and_dead_stays() -> None:
    now = [100.0]
    watch = HostWatch(suspect_s=5, clock=lambda: now[0])
    watch.update([node("n-a", "a", True), node("n-b", "b", False)])
    watch.mark_unanswering("a")
    assert watch.excluded() == {"a", "b"}
    now[0] += 5.1
    assert watch.excluded() == {"b"}
    watch.mark_unanswering("a")
    watch.clear("a")
    assert watch.excluded() == {"b"}
    # Ray empties a dead node's resources: the registered node id still tells.
    watch.update([{"NodeID": "n-a", "Alive": False, "Resources": {}},
                  node("n-b", "b", True)],
                 {"a": {"host": "a", "node_id": "n-a"}, "b": {"host": "b", "node_id": "n-b"}})
    assert watch.excluded() == {"a"}


class FakeCache:
    def __init__(self, hosts: list[str]) -> None:
        self.hosts: dict[str, dict[str, Any]] = {h: {"host": h} for h in hosts}
        self.routes: dict[str, Any] = {}
        self.ready = asyncio.Event()
        self.ready.set()
        self.client = None

    def load(self) -> dict[str, int]:
        return dict.fromkeys(self.hosts, 0)


def fake_router(hosts: list[str], dead_agents: set[str]) -> tuple[RayRouter, list[str]]:
    router = RayRouter(ClusterConfig(lease_ttl_s=5), FakeCache(hosts))  # type: ignore[arg-type]
    asked: list[str] = []

    async def call(name: str, method: str, *args: Any, timeout_s: float | None = None
                   ) -> Outcome[Activated]:
        host = name.removeprefix("agent:")
        asked.append(host)
        if host in dead_agents:
            raise UnavailableError(f"actor {name} died")
        return Outcome.ok(Activated(ServeStatus.SERVING, host, 7, f"svit:{host}:x"))

    router._call = call  # type: ignore[method-assign]
    return router, asked


async def test_placement_never_picks_a_host_ray_reports_dead() -> None:
    router, asked = fake_router(["a", "b"], dead_agents=set())
    # "a" is the least loaded (tie, first by name) but Ray lists its node dead.
    router.host_watch.update([node("n-a", "a", False), node("n-b", "b", True)])
    route = await router._place_once("p1", None)
    assert route.host == "b" and asked == ["b"]


async def test_placement_moves_past_an_agent_that_does_not_answer() -> None:
    router, asked = fake_router(["a", "b"], dead_agents={"a"})
    route = await router._place_once("p1", None)
    assert route.host == "b" and asked == ["a", "b"]
    # "a" is now suspect: the next placement does not even ask it.
    asked.clear()
    route = await router._place_once("p2", None)
    assert route.host == "b" and asked == ["b"]


async def test_placement_with_no_usable_host_is_unavailable() -> None:
    router, asked = fake_router(["a", "b"], dead_agents={"a", "b"})
    with pytest.raises(UnavailableError):
        await router._place_once("p1", None)
    assert sorted(asked) == ["a", "b"]  # each tried once


@pytest.mark.servers
async def test_a_dead_nodes_lease_is_revoked_and_no_live_one(etcd_server: EtcdServer) -> None:
    cluster = f"pl-{uuid.uuid4().hex[:8]}"
    client = open_client(etcd_server.endpoint)
    try:
        leases = {}
        for host, node_id in (("a", "n-a"), ("b", "n-b"), ("c", None)):
            lease = await client.lease(30)
            leases[host] = lease.id
            doc = {"host": host, "agent": f"agent:{host}", "incarnation": 1}
            if node_id is not None:
                doc["node_id"] = node_id
            await client.put(hosts_prefix(cluster) + host.encode(), json.dumps(doc).encode(),
                             lease=lease.id)
        # Negative control: nothing is dead -> nothing revoked.
        table = NodeTable.parse([node("n-a", "a", True), node("n-b", "b", True)])
        assert await revoke_dead_leases(client, cluster, table) == []
        # "a"'s node died; "c" registered no node id (no evidence: untouched);
        # "b" restarted elsewhere would have a new id -- its own stays alive.
        table = NodeTable.parse([node("n-a", "a", False), node("n-b", "b", True),
                                 node("n-c-old", "c", False)])
        assert await revoke_dead_leases(client, cluster, table) == ["a"]
        assert (await client.get_lease_info(leases["a"])).TTL == -1
        assert (await client.get_lease_info(leases["b"])).TTL > 0
        assert (await client.get_lease_info(leases["c"])).TTL > 0
        assert await client.get(hosts_prefix(cluster) + b"a") is None
        for host in ("b", "c"):
            await client.revoke_lease(leases[host])
    finally:
        await client.close()


def test_a_node_entry_without_a_verdict_is_not_dead() -> None:
    """Only ``Alive: False`` is evidence of death; an entry lacking it is neither."""
    table = NodeTable.parse([{"NodeID": "n-a", "Resources": {"svit_host:a": 1.0}}])
    assert table.dead_node_ids == frozenset() and table.dead_hosts() == frozenset()


@pytest.mark.servers
async def test_a_failed_agent_lookup_never_revokes_a_live_hosts_lease(
        etcd_server: EtcdServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed name lookup is no evidence: Ray answers every failed name lookup
    that is not a timeout (the GCS erring under load) with the same ValueError as
    "no such actor", which would revoke every live host's lease under a burst of
    activations. Only Ray's actor table listing the registered agent actor DEAD
    revokes a lease.

    Ray's two answers are replaced here (the failed lookup cannot be provoked on
    demand); the registrations, leases and revokes are real etcd."""
    cluster = f"pl-{uuid.uuid4().hex[:8]}"
    client = open_client(etcd_server.endpoint)
    states: dict[str, str | None] = {"act-a": "ALIVE", "act-b": None}
    # Every agent name lookup fails, as Ray reports a GCS error under load.
    monkeypatch.setattr(_placement, "_agent_missing", lambda host, namespace: True)
    monkeypatch.setattr(_placement, "_agent_state", lambda actor_id: states.get(actor_id),
                        raising=False)
    try:
        leases = {}
        for host, actor_id in (("a", "act-a"), ("b", "act-b"), ("c", None)):
            lease = await client.lease(30)
            leases[host] = lease.id
            doc = {"host": host, "agent": f"agent:{host}", "incarnation": 1,
                   "node_id": f"n-{host}"}
            if actor_id is not None:
                doc["actor_id"] = actor_id
            await client.put(hosts_prefix(cluster) + host.encode(), json.dumps(doc).encode(),
                             lease=lease.id)
        # a: its agent is alive (merely slow); b: the GCS did not say; c: no actor id.
        assert await revoke_agentless_leases(client, cluster, "ns", ["a", "b", "c"]) == []
        for host in ("a", "b", "c"):
            assert (await client.get_lease_info(leases[host])).TTL > 0, host
            assert await client.get(hosts_prefix(cluster) + host.encode()) is not None
        # Negative control: Ray lists a's registered agent actor DEAD -> revoked.
        states["act-a"] = "DEAD"
        assert await revoke_agentless_leases(client, cluster, "ns", ["a", "b", "c"]) == ["a"]
        assert (await client.get_lease_info(leases["a"])).TTL == -1
        assert await client.get(hosts_prefix(cluster) + b"a") is None
        for host in ("b", "c"):
            assert (await client.get_lease_info(leases[host])).TTL > 0, host
            await client.revoke_lease(leases[host])
    finally:
        await client.close()
