"""A slow link to etcd must not keep a client from connecting, nor cost a lease.

gRPC core uses ``grpc.min_reconnect_backoff_ms`` as the deadline of one
connection attempt. Set as low as the reconnect backoff (100 ms .. 1 s), an
HTTP/2 handshake slower than that (a loaded host, a slow proxy) never completes
("connection attempt timed out before receiving SETTINGS frame"), every call on
the channel fails at once, and no keepalive of a new lease gets through before
its local deadline. The channels' connect deadline must let a slow handshake
finish.

Real etcd, real TCP proxy (svit_chaos ``DELAY``: each chunk forwarded 400 ms
late in each direction, so a handshake takes about 0.8 s and a request 0.8 s).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from svit_chaos.proxy import LinkMode, ProxyHub, TcpProxy

from svit_cluster.local import EtcdServer
from svit_cluster.ownership import HostLease, LeaseState, open_client

pytestmark = pytest.mark.servers

DELAY_MS = 400


@pytest.fixture
def slow_link(etcd_server: EtcdServer) -> Iterator[TcpProxy]:
    hub = ProxyHub().start()
    try:
        address, _, port = etcd_server.endpoint.rpartition(":")
        link = hub.proxy("slow/etcd", address, int(port))
        link.set_mode(LinkMode.DELAY, delay_ms=DELAY_MS)
        yield link
    finally:
        hub.close()


async def test_a_client_connects_over_a_slow_link(slow_link: TcpProxy) -> None:
    client = open_client(slow_link.address)
    try:
        # handshake ~0.8 s + request ~0.8 s, inside the 2 s request deadline
        assert await asyncio.wait_for(client.get(b"/slow-link/none"), timeout=10) is None
    finally:
        await client.close()


async def test_a_lease_kept_alive_over_a_slow_link_stays_held(
        etcd_server: EtcdServer, slow_link: TcpProxy) -> None:
    """TTL 3 s: the local deadline is 2.25 s after a keepalive is sent, and one
    keepalive takes ~0.8 s here (~1.6 s if its channel still had to connect),
    so the lease must never be LOST -- as long as the keepalive channel can
    connect, and connects before the grant."""
    grant_client = open_client(etcd_server.endpoint)
    lease = HostLease(grant_client, ttl_s=3, safety_margin_s=0.75,
                      keepalive_client=lambda: open_client(slow_link.address))
    try:
        await lease.grant()
        seen = set()
        for _ in range(120):  # 6 s, two TTLs
            seen.add(lease.state)
            await asyncio.sleep(0.05)
        # SUSPENDED is expected (a keepalive takes longer than the interval);
        # LOST is not: the keepalives do arrive inside the local deadline.
        assert LeaseState.LOST not in seen, lease.lost_reason
        assert LeaseState.HELD in seen
        assert lease.max_keepalive_rtt_s >= DELAY_MS / 1000  # the link was slow
    finally:
        await lease.close()
        await grant_client.revoke_lease(lease.lease_id)
        await grant_client.close()
