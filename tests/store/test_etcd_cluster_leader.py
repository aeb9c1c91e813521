"""A 3-member etcd loses its leader under load: leases, routing and commits go on (issue 20).

A real local etcd cluster (:class:`svit_cluster.local.EtcdClusterServer`, election
timeout 1 s) and the shared redis-server. One host holds a lease (TTL 3 s) through a
client that lists every member with the leader first, owns a process, and commits
to it while it reads the owner record (routing) and watches its lease state. The
leader is SIGKILLed: the remaining two members elect a new one, the client moves
to the next member. The host may see its lease SUSPENDED for a moment (a
keepalive failed on the dead member, so its guard refuses new commits: the
designed self-fencing), but never LOST: it is HELD again well within the TTL,
its owner record never changes, and commits go on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from svit_cluster.errors import UnavailableError
from svit_cluster.local import EtcdClusterServer, RedisServer
from svit_cluster.ownership import HostLease, LeaseState, Owners, open_client
from svit_cluster.process import Process
from svit_cluster.store import RedisBackend, StoreConfig, connect
from tests.store._support import commit_write, unique

pytestmark = pytest.mark.servers

TTL_S = 5  # the default lease TTL (ClusterConfig.lease_ttl_s)


@pytest.fixture
def etcd3(tmp_path: Path) -> Iterator[EtcdClusterServer]:
    server = EtcdClusterServer(tmp_path / "etcd3", members=3, die_with_parent=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.known_issue
@pytest.mark.xfail(strict=False, reason=(
    "known, intermittent (about 2 of 3 runs on a loaded 2-core machine): after the "
    "etcd leader is SIGKILLed the host lease goes LOST by its local deadline (no "
    "keepalive is acknowledged for TTL - margin) although etcd keeps the lease; "
    "the failover client moves between members on every failed request; issue 20"))
async def test_killing_the_etcd_leader_under_load_keeps_leases_routing_and_commits(
    etcd3: EtcdClusterServer, redis_server: RedisServer,
) -> None:
    leader = etcd3.leader()
    assert leader is not None
    # The client asks the leader first, so killing it also takes the client's member.
    order = [leader, *[m for m in etcd3.members if m is not leader]]
    client: Any = open_client(",".join(m.endpoint for m in order), request_timeout_s=1.0)
    lease = HostLease(client, ttl_s=TTL_S, safety_margin_s=0.5)
    await lease.grant()
    cluster = unique("e3")
    host = Owners(lease, cluster=cluster, host="a", address="a:1")
    pid = f"svit://test/{unique('leader')}"
    own = await host.acquire(pid)
    rclient = connect(redis_server.url)
    backend = RedisBackend(rclient, pid, own.token, StoreConfig(prefix=cluster),
                           guard=lease.ensure_held)
    backend.claim()
    proc = Process.create(pid, memory={"count": 0})
    backend.create(proc)

    states: list[LeaseState] = []
    commits: list[float] = []
    refused: list[tuple[float, str]] = []  # (time, lease state) of guard refusals
    routes: list[tuple[float, Any]] = []  # (time, owner record or the error)
    killed_at = 0.0

    async def load(until: float) -> None:
        i = 0
        while time.monotonic() < until:
            i += 1
            states.append(lease.state)
            try:
                await asyncio.to_thread(commit_write, backend, proc, i)
            except UnavailableError as exc:  # the guard: lease not HELD right now
                refused.append((time.monotonic(), str(exc.fields.get("lease_state"))))
                await asyncio.sleep(0.05)
                continue
            commits.append(time.monotonic())
            if i % 5 == 0:
                try:
                    routes.append((time.monotonic(), await host.owner_of(pid)))
                except UnavailableError as exc:
                    routes.append((time.monotonic(), exc))
            await asyncio.sleep(0.01)

    try:
        start = time.monotonic()
        task = asyncio.create_task(load(start + 1.0 + 3 * TTL_S))
        await asyncio.sleep(1.0)
        leader.kill9()
        killed_at = time.monotonic()
        new_leader = await asyncio.to_thread(etcd3.wait_for_leader, 15.0, not_=leader)
        await task
        # a new acquisition goes through the new leader
        other = f"svit://test/{unique('after')}"
        errors: list[BaseException] = []
        for _ in range(20):
            try:
                got = await host.acquire(other)
                break
            except Exception as exc:
                errors.append(exc)
                await asyncio.sleep(0.2)
        else:
            pytest.fail(f"no acquisition after the leader was killed: {errors[-3:]!r}")
        assert got.token > 0
    finally:
        await lease.close()
        await client.close()
        rclient.close()

    assert new_leader is not leader
    assert LeaseState.LOST not in states
    assert states[-1] is LeaseState.HELD
    assert all(state == "suspended" for _, state in refused), refused
    if refused:  # the suspension is short: well within the TTL, then commits resume
        assert refused[-1][0] - refused[0][0] < TTL_S, refused
        assert refused[0][0] >= killed_at
    after = [t for t in commits if t > killed_at]
    assert len(after) > 20, "commits did not go on after the leader was killed"
    assert commits[-1] - killed_at > 2 * TTL_S  # ...for longer than the lease TTL
    # Routing: after at most a transient error, every read names host a, same token.
    later = [r for t, r in routes if t > killed_at + 2.0]
    assert later, "no routing read late after the kill"
    assert all(not isinstance(r, Exception) and r.host == "a" and r.token == own.token
               for r in later), later
    assert backend.head() is not None and backend.head().version == len(commits)  # type: ignore[union-attr]
