"""A leader election longer than a host lease's local deadline: the lease stays
SUSPENDED through it and is HELD again, never LOST (the election grace of
:class:`svit_cluster.ownership.HostLease`); without the grace the same outage
loses the lease.

A real 3-member etcd (election timeout 1 s) and a lease as the host agent's
keeper holds it (TTL 3 s, margin 0.75 s, threaded keepalives on a client that
lists every member, the stopped follower first). The outage: the leader is
SIGKILLed and one follower SIGSTOPped for 2 s, so no leader exists for 2 s
plus an election (3-4 s in all), longer than the 2.25 s from the last
keepalive to the local deadline; the member left answers status requests all
along, while the client's own member holds every request. Nothing expires
meanwhile: without a leader no lease expires, and the new leader renews every
lease when it takes over. The host's ownership record stays, under the same lease.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from svit_chaos.proxy import ProxyHub

from svit_cluster.local import EtcdClusterServer
from svit_cluster.ownership import (
    HostLease,
    KeptLease,
    LeaseState,
    Owners,
    open_client,
    owner_key,
)
from tests._support import unique

pytestmark = pytest.mark.servers

TTL_S = 3
MARGIN_S = 0.75  # min(1.0, TTL / 4), as AgentLease.join sets it
NO_LEADER_S = 2.0


async def _outage(etcd3: EtcdClusterServer, grace_s: float | None, *, proxied: bool = False,
                  keeper: bool = False) -> tuple[Any, list[LeaseState], bool]:
    """Run the outage against a fresh lease; returns the lease, every state it
    showed (polled every 20 ms until 8 s after the kill), and whether its
    ownership record was still there at the end. ``proxied``: the lease reaches
    each member through a TCP proxy, as a chaos host does (a dead member's
    proxy accepts the connection and then closes it, instead of a refusal).
    ``keeper``: the lease is a :class:`KeptLease` (its keeper process keeps
    it alive with the default grace; ``grace_s`` is not used)."""
    leader = etcd3.wait_for_leader(timeout_s=20)
    followers = [m for m in etcd3.members if m is not leader]
    stopped, answering = followers
    # The client's member is the follower that hangs: its first keepalive
    # attempt of the outage is held, not refused (as a member behind a proxy
    # or a blackholed link is).
    order = (stopped, leader, answering)
    hub = ProxyHub().start() if proxied else None
    if hub is not None:
        addresses = []
        for m in order:
            host, port = m.endpoint.rsplit(":", 1)
            addresses.append(hub.proxy(f"etcd-{m.name}", host, int(port)).address)
        endpoints = ",".join(addresses)
    else:
        endpoints = ",".join(m.endpoint for m in order)
    client: Any = open_client(endpoints, request_timeout_s=1.0)
    lease: Any
    if keeper:  # as AgentLease.join holds it: a keeper process of its own
        lease = KeptLease(client, endpoints, ttl_s=TTL_S, safety_margin_s=MARGIN_S)
    else:
        lease = HostLease(client, ttl_s=TTL_S, safety_margin_s=MARGIN_S,
                          keepalive_client=lambda: open_client(endpoints),
                          election_grace_s=grace_s)
    await lease.grant()
    pid = f"svit://test/{unique('grace')}"
    cluster = unique("grace")
    owners = Owners(lease, cluster=cluster, host="a", address="a:1")
    await owners.acquire(pid)
    reader: Any = open_client(answering.endpoint, request_timeout_s=1.0)
    seen: list[LeaseState] = []
    try:
        # right after a keepalive: the outage starts with the most time left
        def last_ok() -> float:
            return float(lease.status().last_ok if keeper else lease.last_ok)

        last = last_ok()
        while last_ok() == last:
            await asyncio.sleep(0.01)
        leader.kill9()
        stopped.pause()
        killed = time.monotonic()
        resumed = False
        while time.monotonic() - killed < 8.0:
            if not resumed and time.monotonic() - killed >= NO_LEADER_S:
                stopped.resume()
                resumed = True
            state = lease.state
            if not seen or seen[-1] is not state:
                seen.append(state)
            await asyncio.sleep(0.02)
        if not resumed:
            stopped.resume()
        record = await reader.get(owner_key(cluster, pid))
        kept = record is not None and int(record.lease) == lease.lease_id
        return lease, seen, kept
    finally:
        stopped.resume()
        if hub is not None:
            hub.close()
        await reader.close()
        await lease.close()
        await client.close()
        leader.start()
        etcd3.wait_for_leader(timeout_s=20)


@pytest.mark.parametrize(("proxied", "keeper"), [(False, False), (True, False), (True, True)],
                         ids=["direct", "proxied", "proxied-keeper"])
async def test_a_leader_election_longer_than_the_deadline_suspends_the_lease_not_loses_it(
        etcd3: EtcdClusterServer, proxied: bool, keeper: bool) -> None:
    lease, seen, kept = await _outage(etcd3, None, proxied=proxied, keeper=keeper)
    assert LeaseState.LOST not in seen, seen
    assert seen[-1] is LeaseState.HELD and LeaseState.SUSPENDED in seen, seen
    assert kept
    if keeper:
        return  # the keeper's process has the counters; the agent sees the states
    assert lease.graces == 1 and not lease.in_grace

    # negative control: the same outage without the grace loses the lease
    lease, seen, _ = await _outage(etcd3, 0.0, proxied=proxied)
    assert seen[-1] is LeaseState.LOST, seen
    assert lease.graces == 0
