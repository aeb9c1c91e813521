"""A cut-off host's LOST lease, revoked in its name by a peer.

Only etcd ends a lease its holder cannot reach: without help its keys stay
until etcd expires it (up to a TTL after the last keepalive that got through).
The holder, once LOST by its own clock, asks a peer to revoke it
(``AgentLease.revoke_lost`` -> ``revoke_lease_id``); the keys go at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from svit_cluster.local import EtcdServer
from svit_cluster.ownership import LeaseState, open_client, revoke_lease_id
from tests._support import unique


async def test_a_peer_revokes_a_lost_lease_and_its_keys_go_long_before_the_ttl(
    make_lease: Callable[..., Any], etcd_server: EtcdServer
) -> None:
    # Margin 2 s: LOST by the holder's clock 3 s after its last keepalive, while
    # etcd still has about 2 s left (with margin 1 s, etcd's whole-second TTL
    # read 0 at that moment in 2 of 3 runs).
    holder = await make_lease(ttl_s=5, safety_margin_s=2.0)
    peer = open_client(etcd_server.endpoint, request_timeout_s=1.0)
    try:
        key = f"/{unique('relay')}/owners/p".encode()
        await peer.put(key, b"record", lease=holder.lease_id)
        cut_at = time.monotonic()
        holder.stop_keepalive()  # cut off: no keepalive reaches etcd any more
        assert await holder.wait_for(LeaseState.LOST, timeout_s=6)
        # LOST by the holder's clock, but etcd still holds the lease and its keys
        assert (await peer.get(key)) is not None
        assert (await peer.get_lease_info(holder.lease_id)).TTL != -1  # -1: gone
        assert await revoke_lease_id(peer, holder.lease_id)
        gone_after = time.monotonic() - cut_at
        assert (await peer.get(key)) is None
        assert (await peer.get_lease_info(holder.lease_id)).TTL == -1
        # long before etcd's own expiry (TTL 5 s after the last keepalive)
        assert gone_after < 4.5, gone_after
        # asking again (a second peer, or the holder once back) is harmless
        assert await revoke_lease_id(peer, holder.lease_id)
        assert not holder.revoked  # the holder itself did not revoke it
    finally:
        await peer.close()


async def test_the_holders_own_revoke_is_recorded(make_lease: Callable[..., Any]) -> None:
    lease = await make_lease()
    assert not lease.revoked
    await lease.revoke()
    assert lease.revoked and lease.state is LeaseState.LOST


async def test_the_holder_revoking_a_lease_that_already_expired_is_not_an_error(
    make_lease: Callable[..., Any], etcd_server: EtcdServer
) -> None:
    """A host shutting down after its lease ran out at etcd: etcd answers "lease not
    found" to the revoke, which means the lease is gone, the goal of the revoke
    (a CI run's shutdown raised on it)."""
    lease = await make_lease(ttl_s=1, safety_margin_s=0.25)
    peer = open_client(etcd_server.endpoint, request_timeout_s=1.0)
    try:
        lease.stop_keepalive()
        deadline = time.monotonic() + 10
        while (await peer.get_lease_info(lease.lease_id)).TTL != -1:
            assert time.monotonic() < deadline, "etcd never expired the lease"
            await asyncio.sleep(0.1)
        await lease.revoke()  # must not raise
        assert lease.revoked and lease.state is LeaseState.LOST
    finally:
        await peer.close()
