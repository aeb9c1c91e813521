"""Ownership on a real etcd: racing acquisitions, tokens, release, watch, lease states."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from svit_cluster.errors import ConflictError, ErrorCode, InvalidInput, UnavailableError
from svit_cluster.local import EtcdServer
from svit_cluster.ownership import HostLease, LeaseState, Owners
from svit_cluster.store import RedisFences, StoreConfig
from tests._support import unique

pytestmark = pytest.mark.servers

MakeLease = Callable[..., Any]


async def test_hosts_racing_to_acquire_one_process_exactly_one_wins(
    make_lease: MakeLease, cluster: str, pid: str
) -> None:
    hosts = [Owners(await make_lease(), cluster=cluster, host=f"h{i}") for i in range(6)]
    results = await asyncio.gather(*(h.acquire(pid) for h in hosts), return_exceptions=True)
    winners = [r for r in results if not isinstance(r, BaseException)]
    assert len(winners) == 1
    for r in results:
        if isinstance(r, BaseException):
            assert isinstance(r, ConflictError)
            assert r.fields["owner_host"] == winners[0].host
            assert r.fields["token"] == winners[0].token
    record = await hosts[0].owner_of(pid)
    assert record is not None and record.token == winners[0].token


async def test_tokens_strictly_increase_across_acquisitions(
    make_lease: MakeLease, cluster: str, pid: str
) -> None:
    a = Owners(await make_lease(), cluster=cluster, host="a", address="10.0.0.1:9")
    b = Owners(await make_lease(), cluster=cluster, host="b")
    tokens = []
    for i in range(6):
        host = (a, b)[i % 2]
        own = await host.acquire(pid)
        assert (await host.acquire(pid)) == own  # a retry by the winner is idempotent
        tokens.append(own.token)
        other = await host.acquire(pid + "-other")  # any acquisition in the cluster
        tokens.append(other.token)
        assert await host.release(own) and await host.release(other)
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
    await a.acquire(pid)
    record = await b.owner_of(pid)
    assert record is not None and (record.host, record.address) == ("a", "10.0.0.1:9")


async def test_a_record_of_this_host_naming_another_actor_is_replaced(
    make_lease: MakeLease, cluster: str, pid: str
) -> None:
    """An acquire whose outcome was unknown left this host's record naming actor
    X; the host then gave X other work and acquires again for actor Y. The old
    record must not come back as Y's ownership: routes read the address from
    the record and would send Y's process to X forever (a real-cluster burst
    on a loaded machine answered 'actor X is not registered' after X was
    stopped). It is replaced, under a new, higher token."""
    lease = await make_lease()
    first = await Owners(lease, cluster=cluster, host="a", address="svit:a:x").acquire(pid)
    owners_y = Owners(lease, cluster=cluster, host="a", address="svit:a:y")
    second = await owners_y.acquire(pid)
    assert second.token > first.token and second.address == "svit:a:y"
    record = await owners_y.owner_of(pid)
    assert record is not None and (record.address, record.token) == ("svit:a:y", second.token)
    assert await owners_y.acquire(pid) == second  # the same address: still idempotent


async def test_release_deletes_only_if_still_ours(
    make_lease: MakeLease, cluster: str, pid: str
) -> None:
    lease_a = await make_lease()
    a = Owners(lease_a, cluster=cluster, host="a")
    b = Owners(await make_lease(), cluster=cluster, host="b")
    own_a = await a.acquire(pid)
    await lease_a.revoke()  # A's record goes with its lease
    own_b = await b.acquire(pid)
    assert own_b.token > own_a.token
    assert await a.release(own_a) is False
    record = await b.owner_of(pid)
    assert record is not None and record.token == own_b.token
    assert await b.release(own_b) is True
    assert await b.owner_of(pid) is None


async def test_a_host_whose_lease_expired_acquires_nothing(
    make_lease: MakeLease, cluster: str, pid: str
) -> None:
    lease = await make_lease()
    owners = Owners(lease, cluster=cluster, host="a")
    await owners.acquire(pid)
    lease.stop_keepalive()
    deadline = time.monotonic() + 8
    while lease.state is not LeaseState.LOST and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert lease.state is LeaseState.LOST
    with pytest.raises(UnavailableError):
        lease.ensure_held()  # the data path's self-fencing check refuses
    with pytest.raises(UnavailableError):
        await owners.acquire(pid)  # a LOST host does not acquire


async def test_lease_states_follow_etcd_outage(make_lease: MakeLease,
                                               fresh_etcd: EtcdServer) -> None:
    seen: list[LeaseState] = []
    lease: HostLease = await make_lease(fresh_etcd, ttl_s=5, safety_margin_s=1.0,
                                        keepalive_interval_s=0.5)
    lease.add_listener(seen.append)
    assert lease.state is LeaseState.HELD
    lease.ensure_held()

    fresh_etcd.stop()
    assert await lease.wait_for(LeaseState.SUSPENDED, timeout_s=3)
    with pytest.raises(UnavailableError) as info:
        lease.ensure_held()
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert info.value.fields["lease_state"] == "suspended"

    fresh_etcd.start()  # back before the deadline: the lease is still alive
    assert await lease.wait_for(LeaseState.HELD, timeout_s=4)

    fresh_etcd.stop()
    assert await lease.wait_for(LeaseState.SUSPENDED, timeout_s=3)
    assert await lease.wait_for(LeaseState.LOST, timeout_s=6)
    fresh_etcd.start()
    await asyncio.sleep(1.0)
    assert lease.state is LeaseState.LOST  # terminal
    assert seen == [LeaseState.SUSPENDED, LeaseState.HELD, LeaseState.SUSPENDED,
                    LeaseState.LOST]


async def test_etcd_down_is_unavailable_with_cause(make_lease: MakeLease,
                                                   fresh_etcd: EtcdServer, pid: str) -> None:
    lease = await make_lease(fresh_etcd, ttl_s=5, safety_margin_s=1.0)
    owners = Owners(lease, cluster="down", host="a")
    fresh_etcd.stop()
    with pytest.raises(UnavailableError) as info:
        await owners.owner_of(pid)
    assert info.value.__cause__ is not None
    assert info.value.fields["op"] == "get_owner"


async def test_a_claim_the_store_refuses_leaves_no_owner_record(
    make_lease: MakeLease, cluster: str, single_rclient: Any, config: StoreConfig
) -> None:
    """An id the store cannot key (the braces of its ``{<id>}`` hash tag) is refused
    by the fence claim; the record acquired for it must not stay behind (a
    later request would route to it and find no actor serving it)."""
    pid = f"svit://test/{unique('brace')}{{x}}"
    owners = Owners(await make_lease(), cluster=cluster, host="a")
    fences = RedisFences(single_rclient, prefix=config.prefix)
    with pytest.raises(InvalidInput) as refused:
        await owners.claim(pid, fences)
    assert refused.value.code == ErrorCode.INVALID_PROCESS_ID
    assert await owners.owner_of(pid) is None
